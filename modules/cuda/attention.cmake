# zt_cuda_attention: flash-style causal attention and the fused classifier +
# cross-entropy on the GPU (launchers in attention.cuh and classifier.cuh).
# include()d by modules/cuda/CMakeLists.txt, and by tests/cuda_attn when that
# file does not exist yet; the guard makes a second include a no-op.
if(TARGET zt_cuda_attention)
  return()
endif()
add_library(zt_cuda_attention STATIC
  ${CMAKE_CURRENT_LIST_DIR}/attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention_mma_fwd.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention_mma_bwd.cu
  ${CMAKE_CURRENT_LIST_DIR}/attention_simt.cu
  ${CMAKE_CURRENT_LIST_DIR}/classifier.cu
)
zt_layer(zt_cuda_attention modules)
target_link_libraries(zt_cuda_attention PUBLIC zt_cuda_runtime zt_runtime CUDA::cudart CUDA::cublasLt)
set_target_properties(zt_cuda_attention PROPERTIES
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  POSITION_INDEPENDENT_CODE ON)
target_compile_options(zt_cuda_attention PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo --expt-relaxed-constexpr>)
