# Decides whether the GPU kernels and backend are built, and for what.
#   CONV1D_GPU=AUTO : CUDA when a CUDA compiler is found, otherwise none.
#   CONV1D_GPU=CUDA : require CUDA (CMAKE_CUDA_ARCHITECTURES defaults to 90).
#   CONV1D_GPU=HIP  : require HIP (CMAKE_HIP_ARCHITECTURES defaults to gfx942).
#   CONV1D_GPU=OFF  : CPU only.
# Sets CONV1D_GPU_LANG to CUDA, HIP or "" for the rest of the build.
include(CheckLanguage)
set(CONV1D_GPU_LANG "")
string(TOUPPER "${CONV1D_GPU}" _gpu)
if(_gpu STREQUAL "AUTO" OR _gpu STREQUAL "CUDA")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    set(CONV1D_GPU_LANG CUDA)
  elseif(_gpu STREQUAL "CUDA")
    message(FATAL_ERROR "CONV1D_GPU=CUDA but no CUDA compiler was found")
  endif()
elseif(_gpu STREQUAL "HIP")
  if(NOT DEFINED CMAKE_HIP_ARCHITECTURES)
    set(CMAKE_HIP_ARCHITECTURES gfx942)
  endif()
  enable_language(HIP)
  set(CONV1D_GPU_LANG HIP)
endif()
message(STATUS "conv1d-serve GPU backend: ${CONV1D_GPU_LANG}")
