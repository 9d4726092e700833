# Layers enforced by the include path (docs/architecture.md, "Layers").
#
# [Note: layer include roots] Each layer's headers are included by their
# folder name ("core/error.hpp", "zero/zero_engine.hpp"). A layer's targets
# get one public include directory, build/layers/<name>, which holds a single
# entry: a link <name> -> the layer's source folder. A target therefore sees
# the headers of its own layer and of the layers it links, and nothing else:
# a lower layer that includes a higher one's header fails to compile with
# "No such file or directory", because it does not (and must not) link it.
# tests/layers builds probes that make such includes and expects exactly that
# failure. The links follow the order of the layers (core, runtime, comm,
# modules, zero, optim, pipeline, io, train, apps).

# zt_layer(TARGET NAME): TARGET belongs to layer NAME, whose sources are the
# current folder (for a sub-folder such as modules/cuda, the layer's folder
# is given by the first target that declared it).
function(zt_layer target name)
  set(root ${PROJECT_BINARY_DIR}/layers/${name})
  get_property(declared GLOBAL PROPERTY ZT_LAYER_${name})
  if(NOT declared)
    set_property(GLOBAL PROPERTY ZT_LAYER_${name} ${CMAKE_CURRENT_SOURCE_DIR})
    file(MAKE_DIRECTORY ${root})
    file(REMOVE ${root}/${name})
    file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR} ${root}/${name} SYMBOLIC)
  endif()
  target_include_directories(${target} PUBLIC ${root})
endfunction()

# zt_layer_probe(NAME TARGET HEADER): an object library, outside `all`, whose
# one source includes HEADER with TARGET's usage requirements, as a source of
# TARGET's layer would.
function(zt_layer_probe name target header)
  set(src ${PROJECT_BINARY_DIR}/layer_probes/${name}.cpp)
  set(text "#include \"${header}\"\n")
  if(EXISTS ${src})
    file(READ ${src} old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE ${src} "${text}")
  endif()
  add_library(${name} OBJECT EXCLUDE_FROM_ALL ${src})
  target_link_libraries(${name} PRIVATE ${target})
endfunction()
