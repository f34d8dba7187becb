#include "common/http/curl_body.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace mailroom {

void CurlBody::Attach(CURL* c) {
  offset_ = 0;
  started_ = false;
  curl_easy_setopt(c, CURLOPT_POST, 1L);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, Read);
  curl_easy_setopt(c, CURLOPT_READDATA, this);
  curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, Seek);
  curl_easy_setopt(c, CURLOPT_SEEKDATA, this);
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body_.size()));
}

size_t CurlBody::Read(char* buffer, size_t size, size_t nitems, void* userdata) {
  auto* self = static_cast<CurlBody*>(userdata);
  const size_t n = std::min(size * nitems, self->body_.size() - self->offset_);
  if (n == 0) return 0;
  std::memcpy(buffer, self->body_.data() + self->offset_, n);
  self->offset_ += n;
  self->started_ = true;
  return n;
}

int CurlBody::Seek(void* userdata, curl_off_t offset, int origin) {
  auto* self = static_cast<CurlBody*>(userdata);
  // Only "start again from the beginning" before anything was read: nothing can have left.
  if (self->started_ || origin != SEEK_SET || offset != 0) return CURL_SEEKFUNC_FAIL;
  self->offset_ = 0;
  return CURL_SEEKFUNC_OK;
}

void SetHttpConnectionOptions(CURL* c) {
  curl_easy_setopt(c, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(c, CURLOPT_MAXAGE_CONN, 20L);
}

}  // namespace mailroom
