// HealthService through a real gRPC server and channel, as a probe calls it.
#include "daemon/status/health_service.h"

#include <grpcpp/grpcpp.h>

#include <memory>

#include "gtest/gtest.h"

namespace kolo::daemon {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = grpc::health::v1::Health::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override { server_->Shutdown(); }

  grpc::Status Check(const std::string& service, HealthCheckResponse* response) {
    grpc::ClientContext context;
    HealthCheckRequest request;
    request.set_service(service);
    return stub_->Check(&context, request, response);
  }

  HealthService service_{{"kolo.v1.Status", "kolo.v1.Admin"}};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
};

TEST_F(HealthServiceTest, TheServerAndItsServicesServe) {
  for (const char* name : {"", "kolo.v1.Status", "kolo.v1.Admin"}) {
    HealthCheckResponse response;
    grpc::Status s = Check(name, &response);
    ASSERT_TRUE(s.ok()) << name << ": " << s.error_message();
    EXPECT_EQ(response.status(), HealthCheckResponse::SERVING) << name;
  }
}

TEST_F(HealthServiceTest, AnUnknownServiceIsNotFound) {
  HealthCheckResponse response;
  grpc::Status s = Check("kolo.v1.Nothing", &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message().find("Nothing"), std::string::npos) << "the name was echoed";
}

TEST_F(HealthServiceTest, AStoppingDaemonIsNotServing) {
  service_.StopServing();
  for (const char* name : {"", "kolo.v1.Status"}) {
    HealthCheckResponse response;
    ASSERT_TRUE(Check(name, &response).ok()) << name;
    EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING) << name;
  }
}

TEST_F(HealthServiceTest, WatchTellsTheCallerToUseCheck) {
  // UNIMPLEMENTED is the answer the protocol has callers stop retrying on.
  grpc::ClientContext context;
  HealthCheckRequest request;
  auto reader = stub_->Watch(&context, request);
  HealthCheckResponse response;
  EXPECT_FALSE(reader->Read(&response));
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_NE(s.error_message().find("Check"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace kolo::daemon
