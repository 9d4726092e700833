zt_add_test(zero_estimator_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_estimator.cpp LIBS zt_zero)
# The estimator's pipeline stages against the partitioner and the schedule
# (estimate_input lives in src/train, the layer that may use src/pipeline).
zt_add_test(zero_estimator_stages_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_estimator_stages.cpp LIBS zt_train)
