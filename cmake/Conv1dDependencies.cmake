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
  find_package(GTest CONFIG REQUIRED)
endif()

find_program(CONV1D_PROTOC protoc REQUIRED)
find_program(CONV1D_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
