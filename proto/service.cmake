# Data-service protos (gRPC services), included by proto/CMakeLists.txt.
sluice_generate_protos(SERVICE_SRCS SERVICE_HDRS TRUE dataservice.proto)
sluice_generate_protos(JOURNAL_SRCS JOURNAL_HDRS FALSE journal.proto)
add_library(sluice_proto_service STATIC ${SERVICE_SRCS} ${JOURNAL_SRCS})
target_include_directories(sluice_proto_service PUBLIC ${PROJECT_BINARY_DIR}/proto ${PROJECT_BINARY_DIR})
target_link_libraries(sluice_proto_service PUBLIC sluice_proto_pipeline gRPC::grpc++ protobuf::libprotobuf)
target_compile_options(sluice_proto_service PRIVATE -w)
