# Third-party dependencies, all from Debian 12 packages
# (scripts/install_deps.sh installs them).
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)
if(CONV1D_BUILD_TESTS)
  # Without GoogleTest (scripts/install_deps.sh --test installs it) the
  # service still builds, e.g. for scripts/serve.sh on a fresh machine.
  find_package(GTest CONFIG)
  if(NOT GTest_FOUND)
    message(STATUS "GoogleTest not found: tests are not built (scripts/install_deps.sh --test)")
    set(CONV1D_BUILD_TESTS OFF)
  endif()
endif()

find_program(CONV1D_PROTOC protoc REQUIRED)
find_program(CONV1D_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
