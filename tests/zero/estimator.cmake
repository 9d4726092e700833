zt_add_test(zero_estimator_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_estimator.cpp LIBS zt_zero)
