#include "sender/transport/outbound_url.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mailroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

OutboundUrl Parsed(const std::string& url) {
  auto u = ParseOutboundUrl(url);
  EXPECT_TRUE(u.ok()) << u.status();
  return u.ok() ? *u : OutboundUrl{};
}

// What libcurl connects to is what the URL's authority says after the last '@': a loopback
// address before it is a user name, not the host.
TEST(OutboundUrlTest, TheHostIsTheOneLibcurlConnectsTo) {
  OutboundUrl u = Parsed("http://127.0.0.1:x@evil.invalid/v1/email");
  EXPECT_EQ(u.host, "evil.invalid");
  EXPECT_TRUE(u.userinfo);
  EXPECT_FALSE(u.loopback);

  u = Parsed("http://user:pw@127.0.0.1/");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_TRUE(u.userinfo);
  EXPECT_TRUE(u.loopback);

  for (const char* url : {"http://127.0.0.1.evil.invalid/", "http://localhost.evil.invalid/",
                          "http://evil.invalid#@127.0.0.1/", "http://evil.invalid?@127.0.0.1/",
                          "http://[::]/", "http://0.0.0.0/", "http://10.0.0.1/"}) {
    u = Parsed(url);
    EXPECT_FALSE(u.loopback) << url << " -> " << u.host;
    EXPECT_FALSE(u.userinfo) << url;
  }
  u = Parsed("http://127.0.0.1#@evil.invalid/");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_TRUE(u.loopback);
}

TEST(OutboundUrlTest, LoopbackAddressesInEveryFormLibcurlReads) {
  for (const char* url :
       {"http://127.0.0.1:8080/mail", "http://localhost/", "HTTP://LocalHost:9000", "http://[::1]/",
        "http://[::1]:8080/token", "http://127.1.2.3/"}) {
    OutboundUrl u = Parsed(url);
    EXPECT_TRUE(u.loopback) << url << " -> " << u.host;
    EXPECT_FALSE(u.userinfo) << url;
    EXPECT_EQ(u.scheme, "http") << url;
  }
  EXPECT_EQ(Parsed("http://[::1]/").host, "[::1]");
  EXPECT_EQ(Parsed("http://[::1]/").port, "80");
  // libcurl writes other forms of an IPv4 address in dotted-decimal before it connects.
  for (const char* url : {"http://2130706433/", "http://0x7f.1/", "http://127.1/"}) {
    OutboundUrl u = Parsed(url);
    EXPECT_EQ(u.host, "127.0.0.1") << url;
    EXPECT_TRUE(u.loopback) << url;
  }
}

TEST(OutboundUrlTest, SchemePortAndUserinfo) {
  OutboundUrl u = Parsed("https://api.example.com/v3");
  EXPECT_EQ(u.scheme, "https");
  EXPECT_EQ(u.host, "api.example.com");
  EXPECT_EQ(u.port, "443");
  EXPECT_FALSE(u.userinfo);
  EXPECT_FALSE(u.loopback);

  u = Parsed("smtps://mail.example:465");
  EXPECT_EQ(u.scheme, "smtps");
  EXPECT_EQ(u.port, "465");
  EXPECT_TRUE(Parsed("smtp://user;AUTH=PLAIN@mail.example:587").userinfo);
  EXPECT_TRUE(Parsed("https://user@api.example.com/").userinfo);
  EXPECT_TRUE(Parsed("https://:pw@api.example.com/").userinfo);
  // A scheme libcurl does not know is returned for the caller to refuse by name.
  EXPECT_EQ(Parsed("gopherx://api.example.com/").scheme, "gopherx");
}

// What libcurl refuses is refused, and the reason holds no part of the URL.
TEST(OutboundUrlTest, WhatLibcurlCannotParseIsAnError) {
  for (const char* url : {"", "127.0.0.1:8080/mail", "api.example.com/v3", "http://", "http:///",
                          "http://[::1/", "http://sec ret.example/", "http://host.example:99999/",
                          "http://host.example/\r\nX-Evil: 1", "http:/\\secret.example"}) {
    auto u = ParseOutboundUrl(url);
    ASSERT_FALSE(u.ok()) << url << " -> " << (u.ok() ? u->host : "");
    EXPECT_EQ(u.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(u.status().message()), Not(HasSubstr("example"))) << url;
    EXPECT_THAT(std::string(u.status().message()), Not(HasSubstr("sec"))) << url;
  }
}

}  // namespace
}  // namespace mailroom
