# `bundle` target: packs the built server, command-line client and load
# generator, with the shared libraries they need, into a relocatable tarball
#   ${CMAKE_BINARY_DIR}/dist/conv1d-serve-<version>-<arch>.tar.gz
# (scripts/bundle.sh; docs/deploy.md says how to run it). Included at the end
# of the top-level CMakeLists.txt, once every executable target exists.
if(NOT TARGET conv1d_server)
  return()
endif()

set(_bundle_targets conv1d_server)
foreach(_t conv1d_client conv1d_load)
  if(TARGET ${_t})
    list(APPEND _bundle_targets ${_t})
  endif()
endforeach()

set(_bundle_arch "${CMAKE_SYSTEM_PROCESSOR}")
if(CONV1D_GPU_LANG)
  string(TOLOWER "-${CONV1D_GPU_LANG}" _bundle_gpu)
  string(APPEND _bundle_arch "${_bundle_gpu}")
endif()

add_custom_target(bundle
  COMMAND "${PROJECT_SOURCE_DIR}/scripts/bundle.sh" "${CMAKE_BINARY_DIR}"
          "${CMAKE_BINARY_DIR}/dist" --version "${PROJECT_VERSION}" --arch "${_bundle_arch}"
  WORKING_DIRECTORY "${CMAKE_BINARY_DIR}"
  COMMENT "Packing conv1d-serve ${PROJECT_VERSION} (${_bundle_arch}) into dist/"
  USES_TERMINAL
  VERBATIM)
add_dependencies(bundle ${_bundle_targets})
unset(_bundle_targets)
unset(_bundle_arch)
unset(_bundle_gpu)
