# zt_cuda_attention: flash-style causal attention and the fused classifier +
# cross-entropy on the GPU (launchers in attention.cuh and classifier.cuh).
# include()d by modules/cuda/CMakeLists.txt, and by tests/cuda_attn when that
# file does not exist yet; the guard makes a second include a no-op.
if(TARGET zt_cuda_attention)
  return()
endif()
add_library(zt_cuda_attention STATIC
  ${CMAKE_CURRENT_LIST_DIR}/attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention_cudnn.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_cudnn_cast.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention_mma_fwd.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention_mma_bwd.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention_simt.cu
  ${CMAKE_CURRENT_LIST_DIR}/classifier.cu
  ${CMAKE_CURRENT_LIST_DIR}/lt_tune.cu
)
zt_layer(zt_cuda_attention modules)
target_link_libraries(zt_cuda_attention PUBLIC zt_cuda_runtime zt_runtime CUDA::cudart CUDA::cublasLt)
set_target_properties(zt_cuda_attention PROPERTIES
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  POSITION_INDEPENDENT_CODE ON)
target_compile_options(zt_cuda_attention PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr>)

# cuDNN's fused attention ([Note: two attention paths] in attention_cudnn.cuh)
# through the header-only cudnn-frontend, which the PyPI wheel
# nvidia-cudnn-frontend installs into <site-packages>/include (jobs/setup.sh
# installs it where the CUDA toolkit is). ZT_CUDNN_FRONTEND_INCLUDE names the
# folder holding cudnn_frontend.h; empty asks python3 where the wheel is.
# Without the headers or libcudnn the path compiles out and the flash kernels
# run everywhere.
set(ZT_CUDNN_FRONTEND_INCLUDE "" CACHE PATH
    "Folder with cudnn_frontend.h (empty: ask python3 for the nvidia-cudnn-frontend wheel's include folder)")
set(_zt_fe_include "${ZT_CUDNN_FRONTEND_INCLUDE}")
if(NOT _zt_fe_include)
  find_program(ZT_PYTHON3 NAMES python3)
  if(ZT_PYTHON3)
    execute_process(
      COMMAND ${ZT_PYTHON3} -c
        "import importlib.metadata as m; print(m.distribution('nvidia-cudnn-frontend').locate_file('include'))"
      OUTPUT_VARIABLE _zt_fe_include OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _zt_fe_rc)
    if(NOT _zt_fe_rc EQUAL 0)
      set(_zt_fe_include "")
    endif()
  endif()
endif()
find_path(ZT_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(ZT_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib)
if(_zt_fe_include AND EXISTS "${_zt_fe_include}/cudnn_frontend.h" AND ZT_CUDNN_INCLUDE_DIR AND ZT_CUDNN_LIBRARY
   AND TARGET CUDA::nvrtc)
  message(STATUS "ztrain: cuDNN attention on (frontend ${_zt_fe_include}, ${ZT_CUDNN_LIBRARY})")
  # SYSTEM: the frontend's own warnings are not ours.
  target_include_directories(zt_cuda_attention SYSTEM PRIVATE "${_zt_fe_include}" "${ZT_CUDNN_INCLUDE_DIR}")
  # The frontend also references NVRTC (for engines it compiles at run time).
  target_link_libraries(zt_cuda_attention PUBLIC ${ZT_CUDNN_LIBRARY} CUDA::nvrtc)
  # Host code, compiled by the C++ compiler (attention_cudnn.cpp's header),
  # at -O1: the frontend's templates took 81 s at -O3 and 42 s at -O1 on a
  # 2-core machine, and the code builds graphs once per shape.
  set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/attention_cudnn.cpp PROPERTIES
    COMPILE_DEFINITIONS "ZT_HAVE_CUDNN=1"
    COMPILE_OPTIONS "-O1")
else()
  message(STATUS "ztrain: cuDNN attention off (cudnn_frontend.h: '${_zt_fe_include}', cudnn.h: "
                 "${ZT_CUDNN_INCLUDE_DIR}, libcudnn: ${ZT_CUDNN_LIBRARY}); set ZT_CUDNN_FRONTEND_INCLUDE or "
                 "pip install nvidia-cudnn-frontend")
endif()
