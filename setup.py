from setuptools import setup, Extension

setup(
    ext_modules=[
        Extension(
            "cpuify._cpuify_rt",
            sources=["src/cpuify/runtime/cpuify_rt.c", "src/cpuify/runtime/block_sched.c",
                     "src/cpuify/runtime/cpuify_tex.c"],
            include_dirs=["src/cpuify/runtime"],
            extra_compile_args=["-O3", "-pthread", "-std=c11"],
            extra_link_args=["-pthread"],
        )
    ]
)
