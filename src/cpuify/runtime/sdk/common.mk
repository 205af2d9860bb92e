################################################################################
# common.mk of `cpuify cuda-sdk`: the make rules of NVIDIA's GPU Computing SDK (2008-2012),
# written for cpuify from their documented use, so that a project's Makefile that ends with
# `include <sdk>/C/common/common.mk` builds unchanged: CUDA files with cpuify's nvcc
# ($(CUDA_INSTALL_PATH)/bin/nvcc), C/C++ files with the host compiler, linked with
# cpuify's CUDA runtime and this SDK's libshrutil and libcutil.
#
# The project's Makefile sets (before the include):
#   EXECUTABLE   the program's name
#   CUFILES      .cu files compiled by nvcc        CU_DEPS  files they include (rebuild on change)
#   CCFILES      .cpp/.cc/.cxx files (C++)         C_DEPS   files those include
#   CFILES       .c files (C)
#   INCLUDES, CFLAGS, CXXFLAGS, NVCCFLAGS (or CUDACCFLAGS), LINKFLAGS, LIB   added to the rules'
#   SMVERSIONFLAGS, GENCODE_*, maxregisters   accepted (-arch/-gencode choose cpuify's PTX target)
#   USECUBLAS, USECUFFT, USECURAND, USEDRVAPI (=1)   link cpuify's cuBLAS, cuFFT, cuRAND,
#                                              driver API library (cuRAND: with the nvidia-curand
#                                              wheel's curand.h, pip install 'cpuify[curand]')
#   NEWCC, NEWCPP, NEWLD   other C, C++ compilers and linker (an MPI code's mpicc, mpicxx)
#   LINKLINE   the link command: a project may add to it after the include
#   USEGLLIB, USEGLUT, USEPARAMGL, USERENDERCHECKGL, USENEWINTEROP, USENPP,
#   USECUDPP   refused: OpenGL interop, NPP and CUDPP are not part of cpuify
# On the make command line (or in the environment):
#   dbg=1 (debug build, -g -D_DEBUG, libcutilD), verbose=1 (show the commands), emu=1 (the
#   device emulation of CUDA <= 3.0: the normal build, outputs named emu*), noinline=1 (the
#   GPGPU-Sim benchmarks' switch: accepted, cpuify inlines as it sees fit)
#   CUDA_INSTALL_PATH (default: the cpuify cuda-home this SDK belongs to), BINDIR (default
#   $(ROOTBINDIR)/linux = ../../bin/linux from a project in <root>/src/<project>), BINSUBDIR
#   (release / debug / emurelease / emudebug), ROOTDIR, ROOTBINDIR, ROOTOBJDIR (obj)
# Targets: the executable (default), clean, clobber, tidy, makedirectories.
################################################################################

.SUFFIXES : .cu .cu_dbg.o .c_dbg.o .cpp_dbg.o .cu_rel.o .c_rel.o .cpp_rel.o .cubin .ptx

CPUIFY_SDK_ROOT   := @CPUIFY_SDK@
CUDA_INSTALL_PATH ?= @CPUIFY_CUDA_HOME@

OSUPPER := LINUX
OSLOWER := linux
OSARCH  := $(shell uname -m)
ifeq ($(OSARCH),x86_64)
  LIB_ARCH := x86_64
else
  LIB_ARCH := $(OSARCH)
endif

# where the SDK's parts are: this SDK's, wherever the project sits
COMMONDIR := $(CPUIFY_SDK_ROOT)/C/common
SHAREDDIR := $(CPUIFY_SDK_ROOT)/shared
LIBDIR    := $(CPUIFY_SDK_ROOT)/C/lib
# where the outputs go, relative to the project (the SDK's layout: <root>/src/<project>);
# never into this SDK's own directory, which is part of cpuify's cache
ROOTDIR    ?= ..
ifeq ($(abspath $(ROOTDIR)),$(abspath $(CPUIFY_SDK_ROOT)/C/src))
  ROOTBINDIR ?= bin
else
  ROOTBINDIR ?= $(ROOTDIR)/../bin
endif
BINDIR     ?= $(ROOTBINDIR)/$(OSLOWER)
ROOTOBJDIR ?= obj

# compilers: cpuify's nvcc, the host compiler for the rest, as the SDK set them (make's or
# the environment's CC/CXX do not count; the make command line overrides as usual)
NVCC := $(CUDA_INSTALL_PATH)/bin/nvcc
CXX  := g++
CC   := gcc
LINK := g++ -fPIC
# a project's own compilers (an MPI code's mpicc/mpicxx)
ifneq ($(strip $(NEWCC)),)
  CC := $(NEWCC)
endif
ifneq ($(strip $(NEWCPP)),)
  CXX := $(NEWCPP)
endif
ifneq ($(strip $(NEWLD)),)
  LINK := $(NEWLD)
endif

ifeq ($(wildcard $(NVCC)),)
  $(error CUDA_INSTALL_PATH=$(CUDA_INSTALL_PATH) has no bin/nvcc: set CUDA_INSTALL_PATH=$$(cpuify cuda-home))
endif

# what cpuify does not provide
ifneq ($(strip $(USEGLLIB)$(USEGLUT)$(USEPARAMGL)$(USERENDERCHECKGL)$(USENEWINTEROP)),)
  $(error $(EXECUTABLE): uses OpenGL (USEGLLIB/USEGLUT/USEPARAMGL/USERENDERCHECKGL/USENEWINTEROP): cpuify's SDK has no OpenGL interoperability)
endif
ifneq ($(strip $(USENPP)$(USECUDPP)),)
  $(error $(EXECUTABLE): USENPP/USECUDPP: NPP and CUDPP are not part of cpuify)
endif

INCLUDES += -I. -I$(CUDA_INSTALL_PATH)/include -I$(COMMONDIR)/inc -I$(SHAREDDIR)/inc

# warnings as the SDK asked for them, and its definitions
CXXWARN_FLAGS := -W -Wall -Wimplicit -Wswitch -Wformat -Wchar-subscripts -Wparentheses \
	-Wmultichar -Wtrigraphs -Wpointer-arith -Wcast-align -Wreturn-type -Wno-unused-function
CWARN_FLAGS := $(CXXWARN_FLAGS) -Wstrict-prototypes -Wmissing-prototypes \
	-Wmissing-declarations -Wnested-externs -Wmain
COMMONFLAGS += $(INCLUDES) -DUNIX -m64
NVCCFLAGS   += $(CUDACCFLAGS)

ifeq ($(dbg),1)
  COMMONFLAGS += -g
  NVCCFLAGS   += -D_DEBUG
  CXXFLAGS    += -D_DEBUG
  CFLAGS      += -D_DEBUG
  BINSUBDIR   ?= debug
  LIBSUFFIX   := D_$(LIB_ARCH)
else
  COMMONFLAGS += -O2
  BINSUBDIR   ?= release
  LIBSUFFIX   := _$(LIB_ARCH)
  NVCCFLAGS   += --compiler-options -fno-strict-aliasing
  CXXFLAGS    += -fno-strict-aliasing
  CFLAGS      += -fno-strict-aliasing
endif
ifeq ($(emu),1)
  BINSUBDIR := emu$(BINSUBDIR)
endif
ifneq ($(maxregisters),)
  NVCCFLAGS += -maxrregcount $(maxregisters)
endif

NVCCFLAGS += $(COMMONFLAGS) $(SMVERSIONFLAGS)
CXXFLAGS  += $(COMMONFLAGS) $(CXXWARN_FLAGS)
CFLAGS    += $(COMMONFLAGS) $(CWARN_FLAGS)

TARGETDIR := $(BINDIR)/$(BINSUBDIR)
TARGET    := $(TARGETDIR)/$(strip $(EXECUTABLE))
OBJDIR    := $(ROOTOBJDIR)/$(LIB_ARCH)/$(BINSUBDIR)

# libraries: shrutil and cutil first (they call nothing of the runtime; shrutil calls cutil),
# the project's, then the runtime
LIB := -L$(LIBDIR) -L$(COMMONDIR)/lib/$(OSLOWER) -L$(SHAREDDIR)/lib -L$(CUDA_INSTALL_PATH)/lib64 \
	-lshrutil$(LIBSUFFIX) -lcutil$(LIBSUFFIX) $(LIB)
ifeq ($(USECUBLAS),1)
  LIB += -lcublas
endif
ifeq ($(USECUFFT),1)
  LIB += -lcufft
endif
ifeq ($(USECURAND),1)
  LIB += -lcurand
endif
ifeq ($(USEDRVAPI),1)
  LIB += -lcuda
endif
LIB += -lcudart

ifeq ($(verbose),1)
  VERBOSE :=
else
  VERBOSE := @
endif

OBJS += $(patsubst %.cpp,$(OBJDIR)/%.cpp.o,$(filter %.cpp,$(notdir $(CCFILES))))
OBJS += $(patsubst %.cc,$(OBJDIR)/%.cc.o,$(filter %.cc,$(notdir $(CCFILES))))
OBJS += $(patsubst %.cxx,$(OBJDIR)/%.cxx.o,$(filter %.cxx,$(notdir $(CCFILES))))
OBJS += $(patsubst %.c,$(OBJDIR)/%.c.o,$(notdir $(CFILES)))
OBJS += $(patsubst %.cu,$(OBJDIR)/%.cu.o,$(notdir $(CUFILES)))

vpath %.cpp $(sort $(dir $(CCFILES)))
vpath %.cc $(sort $(dir $(CCFILES)))
vpath %.cxx $(sort $(dir $(CCFILES)))
vpath %.c $(sort $(dir $(CFILES)))
vpath %.cu $(sort $(dir $(CUFILES)))

.PHONY : all clean clobber tidy makedirectories

all: $(TARGET)

$(OBJDIR)/%.c.o : %.c $(C_DEPS) | makedirectories
	$(VERBOSE)$(CC) $(CFLAGS) -o $@ -c $<

$(OBJDIR)/%.cpp.o : %.cpp $(C_DEPS) | makedirectories
	$(VERBOSE)$(CXX) $(CXXFLAGS) -o $@ -c $<

$(OBJDIR)/%.cc.o : %.cc $(C_DEPS) | makedirectories
	$(VERBOSE)$(CXX) $(CXXFLAGS) -o $@ -c $<

$(OBJDIR)/%.cxx.o : %.cxx $(C_DEPS) | makedirectories
	$(VERBOSE)$(CXX) $(CXXFLAGS) -o $@ -c $<

$(OBJDIR)/%.cu.o : %.cu $(CU_DEPS) | makedirectories
	$(VERBOSE)$(NVCC) $(NVCCFLAGS) -o $@ -c $<

# `make ptx`: each .cu file's PTX, as NVIDIA's nvcc writes it
PTXFILES := $(patsubst %.cu,$(OBJDIR)/%.ptx,$(notdir $(CUFILES)))
$(OBJDIR)/%.ptx : %.cu $(CU_DEPS) | makedirectories
	$(VERBOSE)$(NVCC) $(NVCCFLAGS) -o $@ -ptx $<
ptx: $(PTXFILES)

# recursively expanded: a project may add to it after including this file
LINKLINE = $(LINK) -o $(TARGET) $(OBJS) $(LINKFLAGS) $(LIB)

$(TARGET): $(OBJS) | makedirectories
	$(VERBOSE)$(LINKLINE)

makedirectories:
	$(VERBOSE)mkdir -p $(OBJDIR) $(TARGETDIR)

tidy:
	$(VERBOSE)find . -name '*~' -o -name '*.bak' | xargs rm -f

clean: tidy
	$(VERBOSE)rm -f $(OBJS) $(PTXFILES) $(TARGET)

clobber: clean
	$(VERBOSE)rm -rf $(ROOTOBJDIR)
