from cpuify.lifting.lift import LiftedKernel, KernelParam, lift_kernel

__all__ = ["LiftedKernel", "KernelParam", "lift_kernel"]
