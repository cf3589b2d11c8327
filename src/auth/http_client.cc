#include "auth/http_client.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

namespace idempotency::auth::detail {
namespace {

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Where a transfer's body goes, and how much of it may arrive.
struct BodySink {
  std::string* body;
  std::size_t limit;
  bool overflowed = false;
};

std::size_t append_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto* sink = static_cast<BodySink*>(user);
  const std::size_t n = size * count;
  if (n > sink->limit - sink->body->size()) {
    sink->overflowed = true;
    return 0;  // anything but n makes curl abort the transfer (CURLE_WRITE_ERROR)
  }
  sink->body->append(data, n);
  return n;
}

struct SlistFree {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

}  // namespace

struct HttpClient::Handle {
  struct EasyCleanup {
    void operator()(CURL* c) const { curl_easy_cleanup(c); }
  };
  std::unique_ptr<CURL, EasyCleanup> easy;
};

HttpClient::HttpClient() { global_init(); }
HttpClient::~HttpClient() = default;

std::unique_ptr<HttpClient::Handle> HttpClient::take() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      auto h = std::move(idle_.back());
      idle_.pop_back();
      return h;
    }
  }
  auto h = std::make_unique<Handle>();
  h->easy.reset(curl_easy_init());
  if (!h->easy) throw std::bad_alloc();
  return h;
}

void HttpClient::give_back(std::unique_ptr<Handle> handle) {
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(handle));
}

HttpResponse HttpClient::request(const std::string& method, const std::string& url,
                                 const std::vector<std::string>& headers, const std::string& body,
                                 std::chrono::milliseconds timeout, std::size_t max_reply_bytes) {
  std::unique_ptr<Handle> handle = take();
  CURL* c = handle->easy.get();
  curl_easy_reset(c);
  HttpResponse response;
  std::unique_ptr<curl_slist, SlistFree> list;
  for (const auto& h : headers) {
    curl_slist* next = curl_slist_append(list.get(), h.c_str());
    if (next == nullptr) throw std::bad_alloc();
    (void)list.release();
    list.reset(next);
  }
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list.get());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  BodySink sink{&response.body, max_reply_bytes};
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::min<std::int64_t>(timeout.count(), 10'000)));
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  if (method == "POST") {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  } else {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  }
  const CURLcode rc = curl_easy_perform(c);
  if (sink.overflowed) {
    response.too_large = true;
    response.transport_error =
        "the reply is longer than " + std::to_string(max_reply_bytes) + " bytes";
    response.status = 0;
    response.body.clear();
  } else if (rc != CURLE_OK) {
    response.transport_error = error[0] != '\0' ? error : curl_easy_strerror(rc);
    response.status = 0;
  } else {
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, nullptr);
  give_back(std::move(handle));
  return response;
}

std::string url_encode(const std::string& text) {
  std::string out;
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char ch : text) {
    if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
        ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out.push_back(static_cast<char>(ch));
    } else {
      out.push_back('%');
      out.push_back(kHex[ch >> 4]);
      out.push_back(kHex[ch & 15]);
    }
  }
  return out;
}

bool base64_decode(const std::string& text, std::string& out) {
  std::string padded = text;
  while (padded.size() % 4 != 0) padded.push_back('=');
  out.assign(3 * (padded.size() / 4) + 1, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(padded.data()),
                                static_cast<int>(padded.size()));
  if (n < 0) return false;
  std::size_t size = static_cast<std::size_t>(n);
  // EVP_DecodeBlock counts the padding as zero bytes; drop them.
  if (!padded.empty() && padded.back() == '=') --size;
  if (padded.size() >= 2 && padded[padded.size() - 2] == '=') --size;
  out.resize(size);
  return true;
}

}  // namespace idempotency::auth::detail
