#include "io/s3_env.h"

#include <curl/curl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"

namespace distckpt {
namespace {

// ---- paths -----------------------------------------------------------------

struct ObjectName {
  std::string bucket;
  std::string key;  // no leading or trailing '/', no "//"; empty: the bucket
};

ObjectName ParseS3Path(const std::string& path) {
  std::string_view rest = path;
  if (rest.starts_with("s3://") || rest.starts_with("S3://")) rest.remove_prefix(5);
  while (rest.starts_with('/')) rest.remove_prefix(1);
  const size_t slash = rest.find('/');
  ObjectName name;
  name.bucket = std::string(rest.substr(0, slash));
  if (name.bucket.empty()) {
    Fail(ErrorKind::kInvalidArgument, "{}: an s3:// path names a bucket (s3://bucket/key)", path);
  }
  if (slash != std::string_view::npos) {
    for (char c : rest.substr(slash + 1)) {
      if (c == '/' && (name.key.empty() || name.key.back() == '/')) continue;
      name.key.push_back(c);
    }
    while (!name.key.empty() && name.key.back() == '/') name.key.pop_back();
  }
  return name;
}

// RFC 3986 unreserved characters stay; '/' stays in a path, not in a query value.
std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string XmlUnescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out.push_back(s[i]);
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) {
      out.push_back(s[i]);
      continue;
    }
    const std::string_view entity = s.substr(i + 1, semi - i - 1);
    if (entity == "amp")
      out.push_back('&');
    else if (entity == "lt")
      out.push_back('<');
    else if (entity == "gt")
      out.push_back('>');
    else if (entity == "quot")
      out.push_back('"');
    else if (entity == "apos")
      out.push_back('\'');
    else if (entity.starts_with("#x"))
      out.push_back(
          static_cast<char>(std::strtol(std::string(entity.substr(2)).c_str(), nullptr, 16)));
    else if (entity.starts_with('#'))
      out.push_back(
          static_cast<char>(std::strtol(std::string(entity.substr(1)).c_str(), nullptr, 10)));
    else {
      out.append(s.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

// The text of each <tag>...</tag> in `xml`, in order.
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> found;
  const std::string open = fmt::format("<{}>", tag), close = fmt::format("</{}>", tag);
  for (size_t at = xml.find(open); at != std::string_view::npos; at = xml.find(open, at)) {
    const size_t begin = at + open.size();
    const size_t end = xml.find(close, begin);
    if (end == std::string_view::npos) break;
    found.push_back(xml.substr(begin, end - begin));
    at = end + close.size();
  }
  return found;
}

std::string XmlElement(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> all = XmlElements(xml, tag);
  return all.empty() ? std::string() : XmlUnescape(all.front());
}

// ---- configuration ---------------------------------------------------------

std::string GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

std::string HomeFile(const char* env_name, const char* default_name) {
  std::string path = GetEnv(env_name);
  if (!path.empty()) return path;
  const std::string home = GetEnv("HOME");
  return home.empty() ? std::string() : home + "/.aws/" + default_name;
}

// The keys of section `section` of an INI file (~/.aws/credentials, config).
std::map<std::string, std::string> IniSection(const std::string& path, const std::string& section) {
  std::map<std::string, std::string> values;
  std::ifstream in(path);
  std::string line, current;
  auto trim = [](std::string s) {
    const size_t b = s.find_first_not_of(" \t\r");
    const size_t e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      current = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find('=');
    if (current != section || eq == std::string::npos) continue;
    values[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return values;
}

int EnvInt(const char* name, int fallback, int lo, int hi) {
  const std::string text = GetEnv(name);
  if (text.empty()) return fallback;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (*end != '\0' || value < lo || value > hi) {
    Fail(ErrorKind::kInvalidArgument, "{}={}: expected an integer in [{}, {}]", name, text, lo, hi);
  }
  return static_cast<int>(value);
}

// ---- requests --------------------------------------------------------------

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};

// A thread's curl handle, and the socket of its connection (the store's
// endpoint: one at a time), which OnHeader acknowledges through.
struct ThreadCurl {
  CURL* handle = nullptr;
  curl_socket_t socket = CURL_SOCKET_BAD;
  ~ThreadCurl() {
    if (handle) curl_easy_cleanup(handle);
  }
  CURL* Get() {
    if (!handle) handle = curl_easy_init();
    if (!handle) Fail(ErrorKind::kIo, "s3: curl_easy_init failed");
    curl_easy_reset(handle);
    return handle;
  }
};

struct Request {
  const char* method = "GET";
  ObjectName object;
  std::string query;  // sorted "a=b&c=d", each value UriEncoded (SigV4 signs it as sent)
  std::vector<std::string> headers;
  std::span<const std::byte> body;  // PUT/POST
  std::span<std::byte> dst;         // GET into caller memory (exactly; else into Response::body)
};

struct Response {
  long status = 0;
  std::string body;       // an error's XML, a listing; not a GET into dst
  uint64_t received = 0;  // bytes into dst
  std::string etag;
  std::optional<uint64_t> content_length;
  bool overflow = false;  // more bytes than dst holds
};

int OnSocketOpened(void* user, curl_socket_t socket, curlsocktype) {
  static_cast<ThreadCurl*>(user)->socket = socket;
  return CURL_SOCKOPT_OK;
}

int OnSocketClose(void* user, curl_socket_t socket) {
  auto* thread_curl = static_cast<ThreadCurl*>(user);
  if (thread_curl->socket == socket) thread_curl->socket = CURL_SOCKET_BAD;
  return close(socket);
}

struct Transfer {
  CURL* curl;
  const ThreadCurl* thread_curl;
  Response* response;
  std::span<const std::byte> body;
  size_t sent = 0;
  std::span<std::byte> dst;
};

size_t OnWrite(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (t->dst.data() != nullptr && status >= 200 && status < 300) {
    Response& r = *t->response;
    if (r.received + bytes > t->dst.size()) {
      r.overflow = true;
      return 0;  // abort: the object is longer than asked for
    }
    std::memcpy(t->dst.data() + r.received, data, bytes);
    r.received += bytes;
    return bytes;
  }
  if (t->response->body.size() < (64 << 20)) t->response->body.append(data, bytes);
  return bytes;
}

size_t OnRead(char* buffer, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = std::min(size * n, t->body.size() - t->sent);
  std::memcpy(buffer, t->body.data() + t->sent, bytes);
  t->sent += bytes;
  return bytes;
}

// The answer's headers are in: acknowledge them at once. A server that
// leaves Nagle's algorithm on (Ceph's RADOS Gateway: beast's tcp_nodelay is
// off by default) holds a small body back until the segment before it is
// acknowledged, and on a connection reused for request after request Linux
// delays that acknowledgement by 40 ms: a small ranged GET took 42-48 ms
// against ci/s3-gateway, a 1 MiB one 3-8 ms (the curl tool's the same).
void AckNow(const ThreadCurl& thread_curl) {
#ifdef TCP_QUICKACK
  if (thread_curl.socket == CURL_SOCKET_BAD) return;
  const int one = 1;
  setsockopt(thread_curl.socket, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
#endif
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  std::string_view line(data, bytes);
  if (line == "\r\n" || line == "\n") AckNow(*t->thread_curl);
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' '))
      value.remove_suffix(1);
    if (name == "etag") t->response->etag = std::string(value);
    if (name == "content-length")
      t->response->content_length = std::strtoull(std::string(value).c_str(), nullptr, 10);
  }
  return bytes;
}

bool RetryableCurlError(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

}  // namespace

class S3Env::Client {
 public:
  Client(const S3Config& config, S3Counters& counters) : config_(config), counters_(counters) {
    static CurlGlobal global;
    sigv4_ = fmt::format("aws:amz:{}:s3", config_.region);
    userpwd_ = config_.access_key + ":" + config_.secret_key;
  }

  std::string Url(const Request& r) const {
    std::string url = fmt::format("{}/{}", config_.endpoint, UriEncode(r.object.bucket, false));
    if (!r.object.key.empty() || r.query.empty()) url += "/" + UriEncode(r.object.key, true);
    if (!r.query.empty()) url += "?" + r.query;
    return url;
  }

  // Sends `r`, retrying what may pass (connection failures, 5xx, SlowDown);
  // returns the last answer. Throws CheckpointError(kIo) "<op> <path>: ..."
  // when the endpoint cannot be reached at all.
  Response Perform(const Request& r, std::string_view op, const std::string& path) {
    static thread_local ThreadCurl thread_curl;
    thread_local std::mt19937 jitter(std::random_device{}());
    const std::string url = Url(r);
    std::string last_error;
    for (int attempt = 0;; ++attempt) {
      Response response;
      CURL* curl = thread_curl.Get();
      Transfer t{curl, &thread_curl, &response, r.body, 0, r.dst};
      curl_slist* headers = curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
      if (!config_.session_token.empty()) {
        headers =
            curl_slist_append(headers, ("x-amz-security-token: " + config_.session_token).c_str());
      }
      for (const std::string& h : r.headers) headers = curl_slist_append(headers, h.c_str());
      curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
      curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4_.c_str());
      curl_easy_setopt(curl, CURLOPT_USERPWD, userpwd_.c_str());
      curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
      curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
      curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);  // stalled 60 s: a timeout, retried
      curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
      curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnWrite);
      curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
      curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
      curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
      curl_easy_setopt(curl, CURLOPT_SOCKOPTFUNCTION, OnSocketOpened);
      curl_easy_setopt(curl, CURLOPT_SOCKOPTDATA, &thread_curl);
      curl_easy_setopt(curl, CURLOPT_CLOSESOCKETFUNCTION, OnSocketClose);
      curl_easy_setopt(curl, CURLOPT_CLOSESOCKETDATA, &thread_curl);
      const std::string_view method = r.method;
      if (method == "HEAD") {
        curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
      } else if (method == "PUT") {
        curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(curl, CURLOPT_READFUNCTION, OnRead);
        curl_easy_setopt(curl, CURLOPT_READDATA, &t);
        curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      } else if (method == "POST") {
        curl_easy_setopt(curl, CURLOPT_POST, 1L);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, reinterpret_cast<const char*>(r.body.data()));
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      } else if (method != "GET") {
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, r.method);
      }
      counters_.requests++;
      const CURLcode code = curl_easy_perform(curl);
      curl_slist_free_all(headers);
      curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
      bool retry = false;
      if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && response.overflow)) {
        last_error = fmt::format("{} (curl error {}) from {}", curl_easy_strerror(code),
                                 static_cast<int>(code), config_.endpoint);
        retry = RetryableCurlError(code);
        if (!retry) Fail(ErrorKind::kIo, "{} {}: {}", op, path, last_error);
      } else if (response.status >= 500 || XmlElement(response.body, "Code") == "SlowDown") {
        last_error = fmt::format("HTTP {} {}", response.status, XmlElement(response.body, "Code"));
        retry = true;
      }
      if (!retry) return response;
      if (attempt >= config_.retries) {
        Fail(ErrorKind::kIo, "{} {}: {} (after {} attempts)", op, path, last_error, attempt + 1);
      }
      counters_.retries++;
      const int64_t base_ms = 100LL << std::min(attempt, 6);
      std::this_thread::sleep_for(std::chrono::milliseconds(
          base_ms / 2 + std::uniform_int_distribution<int64_t>(0, base_ms)(jitter)));
    }
  }

  // A non-2xx answer as CheckpointError: 404 is ENOENT (as POSIX says it).
  [[noreturn]] static void FailStatus(const Response& r, std::string_view op,
                                      const std::string& path) {
    if (r.status == 404) FailIo(op, path, ENOENT);
    const std::string code = XmlElement(r.body, "Code");
    const std::string message = XmlElement(r.body, "Message");
    Fail(ErrorKind::kIo, "{} {}: HTTP {}{}{}{}", op, path, r.status, code.empty() ? "" : " ", code,
         message.empty() ? "" : ": " + message);
  }

  static void Check(const Response& r, std::string_view op, const std::string& path) {
    if (r.status < 200 || r.status >= 300) FailStatus(r, op, path);
  }

  // HEAD: the object's size, or nullopt when there is none.
  std::optional<uint64_t> Head(const std::string& path, const ObjectName& object) {
    if (object.key.empty()) return std::nullopt;
    Request r;
    r.method = "HEAD";
    r.object = object;
    Response response = Perform(r, "stat", path);
    if (response.status == 404) return std::nullopt;
    Check(response, "stat", path);
    return response.content_length.value_or(0);
  }

  void Put(const std::string& path, const ObjectName& object, std::span<const std::byte> bytes) {
    Request r;
    r.method = "PUT";
    r.object = object;
    r.body = bytes;
    Check(Perform(r, "write", path), "write", path);
    counters_.bytes_sent += bytes.size();
  }

  void Delete(const std::string& path, const ObjectName& object) {
    Request r;
    r.method = "DELETE";
    r.object = object;
    Response response = Perform(r, "remove", path);
    if (response.status != 404) Check(response, "remove", path);
  }

  // Bytes [offset, offset + dst.size()) of the object, exactly.
  void GetRange(const std::string& path, const ObjectName& object, uint64_t offset,
                std::span<std::byte> dst) {
    if (dst.empty()) return;
    Request r;
    r.object = object;
    r.dst = dst;
    r.headers.push_back(fmt::format("Range: bytes={}-{}", offset, offset + dst.size() - 1));
    Response response = Perform(r, "read", path);
    counters_.get_requests++;
    counters_.bytes_received += response.received;
    if (response.status == 416 || (response.status / 100 == 2 && response.received < dst.size())) {
      std::optional<uint64_t> now = Head(path, object);
      Fail(ErrorKind::kCorruption, "truncated file {}: wanted {} bytes at offset {}, file has {}",
           path, dst.size(), offset, now.value_or(0));
    }
    Check(response, "read", path);
    if (response.status == 200 && offset != 0) {
      Fail(ErrorKind::kIo, "read {}: the store ignored the byte range {}-{}", path, offset,
           offset + dst.size() - 1);
    }
  }

  // One page of ListObjectsV2 under `prefix`.
  struct Listing {
    std::vector<std::string> keys;      // full keys
    std::vector<std::string> prefixes;  // full common prefixes (with '/'), with a delimiter
    std::string next;                   // continuation token; empty: the last page
  };
  Listing List(const std::string& path, const std::string& bucket, const std::string& prefix,
               bool delimit, const std::string& token, int max_keys = 1000) {
    Request r;
    r.object.bucket = bucket;
    // Sorted by name: libcurl 7.88 signs the query as sent.
    std::vector<std::string> params;
    if (!token.empty()) params.push_back("continuation-token=" + UriEncode(token, false));
    if (delimit) params.push_back("delimiter=%2F");
    params.push_back("list-type=2");
    params.push_back(fmt::format("max-keys={}", max_keys));
    params.push_back("prefix=" + UriEncode(prefix, false));
    r.query = fmt::format("{}", fmt::join(params, "&"));
    Response response = Perform(r, "list directory", path);
    Check(response, "list directory", path);
    Listing listing;
    for (std::string_view contents : XmlElements(response.body, "Contents")) {
      listing.keys.push_back(XmlElement(contents, "Key"));
    }
    for (std::string_view common : XmlElements(response.body, "CommonPrefixes")) {
      listing.prefixes.push_back(XmlElement(common, "Prefix"));
    }
    if (XmlElement(response.body, "IsTruncated") == "true") {
      listing.next = XmlElement(response.body, "NextContinuationToken");
    }
    return listing;
  }

  // Every key under prefix `key`/ (and `key` itself when `and_self`).
  std::vector<std::string> AllKeys(const std::string& path, const ObjectName& object) {
    std::vector<std::string> keys;
    const std::string prefix = object.key.empty() ? "" : object.key + "/";
    std::string token;
    do {
      Listing page = List(path, object.bucket, prefix, false, token);
      keys.insert(keys.end(), page.keys.begin(), page.keys.end());
      token = page.next;
    } while (!token.empty());
    return keys;
  }

  const S3Config& config() const { return config_; }
  S3Counters& counters() { return counters_; }

 private:
  const S3Config& config_;
  S3Counters& counters_;
  std::string sigv4_, userpwd_;
};

namespace {

// Runs fn(i) for i in [0, n) on up to `parallel` threads; the first error wins.
template <typename Fn>
void ParallelFor(size_t n, int parallel, Fn&& fn) {
  if (n <= 1 || parallel <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex mu;
  auto work = [&] {
    for (size_t i; (i = next++) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
        next = n;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::min<int>(parallel, static_cast<int>(n)); ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

// Buffers appended bytes; a file of at most part_bytes is one PUT at Close,
// a larger one a multipart upload whose parts go out in the background while
// the writer appends (at most `parallel` in flight), completed at Close.
class S3WritableFile : public WritableFile {
 public:
  S3WritableFile(S3Env::Client& client, std::string path, ObjectName object)
      : client_(client), path_(std::move(path)), object_(std::move(object)) {}

  ~S3WritableFile() override {
    // Not closed: nothing may appear. Wait for the parts in flight, then
    // abort the upload (best effort; the store's lifecycle removes it otherwise).
    for (auto& part : parts_) {
      try {
        part.wait();
      } catch (...) {
      }
    }
    if (!closed_ && !upload_id_.empty()) {
      try {
        Request r;
        r.method = "DELETE";
        r.object = object_;
        r.query = "uploadId=" + UriEncode(upload_id_, false);
        client_.Perform(r, "abort upload", path_);
      } catch (...) {
      }
    }
  }

  void Append(std::span<const std::byte> data) override {
    CheckOpen();
    size_ += data.size();
    const uint64_t part = client_.config().part_bytes;
    while (!data.empty()) {
      const size_t take = std::min<size_t>(data.size(), part - buffer_.size());
      buffer_.insert(buffer_.end(), data.begin(), data.begin() + take);
      data = data.subspan(take);
      if (buffer_.size() == part) SendPart();
    }
  }

  void WriteAt(uint64_t offset, std::span<const std::byte> data) override {
    Fail(ErrorKind::kUnsupported,
         "s3 storage cannot overwrite bytes of {} (it has no writes at an offset)", path_);
  }

  void Sync() override { CheckOpen(); }  // durable at Close

  void Close() override {
    if (closed_) return;
    if (failed_) Fail(ErrorKind::kIo, "write {}: an earlier write failed", path_);
    failed_ = true;  // until it succeeds
    if (upload_id_.empty()) {
      client_.Put(path_, object_, buffer_);
    } else {
      if (!buffer_.empty()) SendPart();
      std::string xml = "<CompleteMultipartUpload>";
      for (size_t i = 0; i < parts_.size(); ++i) {
        xml += fmt::format("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", i + 1,
                           parts_[i].get());
      }
      xml += "</CompleteMultipartUpload>";
      Request r;
      r.method = "POST";
      r.object = object_;
      r.query = "uploadId=" + UriEncode(upload_id_, false);
      r.body = std::as_bytes(std::span(xml.data(), xml.size()));
      r.headers.push_back("Content-Type: application/xml");
      Response response = client_.Perform(r, "complete upload of", path_);
      S3Env::Client::Check(response, "complete upload of", path_);
      // A 200 may still carry an error (S3's CompleteMultipartUpload).
      if (response.body.find("<Error>") != std::string::npos) {
        S3Env::Client::FailStatus(response, "complete upload of", path_);
      }
    }
    buffer_.clear();
    buffer_.shrink_to_fit();
    failed_ = false;
    closed_ = true;
  }

  uint64_t size() const override { return size_; }

 private:
  void CheckOpen() const {
    if (closed_) Fail(ErrorKind::kInvalidArgument, "write {}: file closed", path_);
  }

  void SendPart() {
    if (upload_id_.empty()) {
      Request r;
      r.method = "POST";
      r.object = object_;
      r.query = "uploads=";
      Response response = client_.Perform(r, "start upload of", path_);
      S3Env::Client::Check(response, "start upload of", path_);
      upload_id_ = XmlElement(response.body, "UploadId");
      if (upload_id_.empty()) {
        Fail(ErrorKind::kIo, "start upload of {}: the store returned no UploadId", path_);
      }
    }
    // Bound the parts in flight: wait for the oldest still running.
    const int parallel = std::max(1, client_.config().parallel);
    size_t running = 0;
    for (auto& p : parts_) {
      if (p.wait_for(std::chrono::seconds(0)) != std::future_status::ready) ++running;
    }
    if (running >= static_cast<size_t>(parallel)) {
      for (auto& p : parts_) {
        if (p.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
          p.wait();
          break;
        }
      }
    }
    const int number = static_cast<int>(parts_.size()) + 1;
    auto bytes = std::make_shared<std::vector<std::byte>>(std::move(buffer_));
    buffer_ = {};
    buffer_.reserve(client_.config().part_bytes);
    parts_.push_back(std::async(std::launch::async, [this, number, bytes] {
                       Request r;
                       r.method = "PUT";
                       r.object = object_;
                       r.query = fmt::format("partNumber={}&uploadId={}", number,
                                             UriEncode(upload_id_, false));
                       r.body = *bytes;
                       Response response = client_.Perform(r, "write", path_);
                       S3Env::Client::Check(response, "write", path_);
                       client_.counters().bytes_sent += bytes->size();
                       return response.etag;
                     }).share());
  }

  S3Env::Client& client_;
  std::string path_;
  ObjectName object_;
  std::vector<std::byte> buffer_;
  uint64_t size_ = 0;
  std::string upload_id_;
  std::vector<std::shared_future<std::string>> parts_;
  bool closed_ = false;
  bool failed_ = false;
};

class S3RandomAccessFile : public RandomAccessFile {
 public:
  S3RandomAccessFile(S3Env::Client& client, std::string path, ObjectName object, uint64_t size)
      : client_(client), path_(std::move(path)), object_(std::move(object)), size_(size) {}

  void Read(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset + dst.size() > size_) {
      Fail(ErrorKind::kCorruption, "truncated file {}: wanted {} bytes at offset {}, file has {}",
           path_, dst.size(), offset, size_);
    }
    if (ReadPlanned(offset, dst)) return;
    const uint64_t piece = client_.config().part_bytes;
    if (dst.size() < piece && !hinted_) {
      // Read-ahead, for sequential reads only: a read that starts where the
      // previous one ended fetches a window (1 MiB, doubling up to two parts, in parallel GETs)
      // and the reads after it come from memory. A read elsewhere (a
      // resharded load's runs) is a GET of exactly its bytes.
      std::lock_guard lock(mu_);
      if (offset >= ahead_offset_ && offset + dst.size() <= ahead_offset_ + ahead_.size()) {
        std::memcpy(dst.data(), ahead_.data() + (offset - ahead_offset_), dst.size());
        next_ = offset + dst.size();
        return;
      }
      if (offset == next_) {
        window_ = std::clamp<uint64_t>(window_ * 2, 1 << 20, 2 * piece);
        const uint64_t want = std::min(std::max<uint64_t>(window_, dst.size()), size_ - offset);
        ahead_.resize(want);
        ahead_offset_ = offset;
        try {
          // in `parallel` GETs at once, of at least 1 MiB each
          const uint64_t n = std::clamp<uint64_t>(want >> 20, 1, client_.config().parallel);
          const uint64_t each = (want + n - 1) / n;
          ParallelFor(n, client_.config().parallel, [&](size_t i) {
            const uint64_t begin = i * each;
            if (begin >= want) return;
            client_.GetRange(path_, object_, offset + begin,
                             std::span(ahead_).subspan(begin, std::min(each, want - begin)));
          });
        } catch (...) {
          ahead_.clear();
          throw;
        }
        std::memcpy(dst.data(), ahead_.data(), dst.size());
        next_ = offset + dst.size();
        return;
      }
      window_ = 0;
      next_ = offset + dst.size();
    }
    ReadParts(offset, dst);
  }

  void ReadParts(uint64_t offset, std::span<std::byte> dst) const {
    const uint64_t piece = client_.config().part_bytes;
    if (dst.size() <= 2 * piece) return client_.GetRange(path_, object_, offset, dst);
    const size_t n = (dst.size() + piece - 1) / piece;
    ParallelFor(n, client_.config().parallel, [&](size_t i) {
      const uint64_t begin = i * piece;
      client_.GetRange(path_, object_, offset + begin,
                       dst.subspan(begin, std::min<uint64_t>(piece, dst.size() - begin)));
    });
  }

  // Consecutive bytes: one ranged GET when the parts are small, then split.
  void ReadGathered(uint64_t offset, std::span<const std::span<std::byte>> parts) const override {
    uint64_t total = 0;
    for (std::span<std::byte> part : parts) total += part.size();
    if (parts.size() <= 1 || total > client_.config().part_bytes) {
      return RandomAccessFile::ReadGathered(offset, parts);
    }
    std::vector<std::byte> buffer(total);
    Read(offset, buffer);
    uint64_t at = 0;
    for (std::span<std::byte> part : parts) {
      std::memcpy(part.data(), buffer.data() + at, part.size());
      at += part.size();
    }
  }

  // The hinted ranges, cut into pieces of 1 MiB up to half a part, fetched
  // `parallel` pieces ahead of the thread's reads (ranged GETs in flight
  // while it checks the bytes before: the reader no longer waits for a whole
  // window, then fetches the next). Exactly the hinted bytes are fetched.
  void WillRead(std::span<const std::pair<uint64_t, uint64_t>> ranges) const override {
    uint64_t total = 0;
    for (const auto& [offset, length] : ranges) {
      if (offset > size_ || length > size_ - offset) return;  // Read names the truncation
      total += length;
    }
    const int parallel = std::max(1, client_.config().parallel);
    auto plan = std::make_unique<Plan>();
    if (total >= kPlannedBytes) {
      hinted_ = true;
      const uint64_t piece =
          std::clamp<uint64_t>((total + parallel - 1) / parallel, 1 << 20, MaxPiece());
      for (const auto& [offset, length] : ranges) {
        for (uint64_t at = 0; at < length; at += piece) {
          plan->pieces.push_back({offset + at, std::min(piece, length - at)});
        }
      }
    }
    DropPlan();
    if (plan->pieces.empty()) return;
    for (int i = 0; i < parallel; ++i) Launch(*plan);
    std::lock_guard lock(plans_mu_);
    plans_[std::this_thread::get_id()] = std::move(plan);
  }

  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  // Below this a hint is not worth the threads: reads go as without it.
  static constexpr uint64_t kPlannedBytes = 1 << 20;

  struct Piece {
    uint64_t offset, length;
    std::unique_ptr<std::byte[]> bytes;  // MaxPiece() bytes
    std::future<void> done;              // (a std::async future: destroying it waits)
  };

  uint64_t MaxPiece() const { return std::max<uint64_t>(client_.config().part_bytes / 2, 1 << 20); }

  // Piece buffers are reused (up to 2 * parallel a file): fresh ones cost
  // page faults and zeroing, a quarter of a load's CPU time here.
  std::unique_ptr<std::byte[]> TakeBuffer() const {
    {
      std::lock_guard lock(plans_mu_);
      if (!free_.empty()) {
        std::unique_ptr<std::byte[]> buffer = std::move(free_.back());
        free_.pop_back();
        return buffer;
      }
    }
    return std::unique_ptr<std::byte[]>(new std::byte[MaxPiece()]);
  }

  void GiveBuffer(std::unique_ptr<std::byte[]> buffer) const {
    std::lock_guard lock(plans_mu_);
    if (free_.size() < 2 * static_cast<size_t>(std::max(1, client_.config().parallel))) {
      free_.push_back(std::move(buffer));
    }
  }
  struct Plan {
    std::deque<Piece> pieces;  // not yet read, in order
    size_t launched = 0;       // the first `launched` are fetched or in flight
  };

  Plan* ThreadPlan() const {
    std::lock_guard lock(plans_mu_);
    auto it = plans_.find(std::this_thread::get_id());
    return it == plans_.end() ? nullptr : it->second.get();
  }

  void DropPlan() const {
    std::unique_ptr<Plan> plan;  // destroyed outside the lock: waits for its pieces in flight
    std::lock_guard lock(plans_mu_);
    auto it = plans_.find(std::this_thread::get_id());
    if (it == plans_.end()) return;
    plan = std::move(it->second);
    plans_.erase(it);
  }

  void Launch(Plan& plan) const {
    if (plan.launched >= plan.pieces.size()) return;
    Piece& piece = plan.pieces[plan.launched++];
    piece.bytes = TakeBuffer();
    piece.done = std::async(std::launch::async, [this, &piece] {
      client_.GetRange(path_, object_, piece.offset, std::span(piece.bytes.get(), piece.length));
    });
  }

  // A read of the thread's plan: its bytes from the pieces (waiting for
  // them; a piece's error is the read's, and ends the plan), the next pieces
  // launched as these are consumed. False: not in the plan (read as without).
  bool ReadPlanned(const uint64_t offset, std::span<std::byte> dst) const {
    Plan* plan = ThreadPlan();
    if (plan == nullptr || dst.empty()) return false;
    std::deque<Piece>& pieces = plan->pieces;
    // [offset, end) must lie in consecutive pieces, from the first that ends past offset.
    const uint64_t end = offset + dst.size();
    size_t first = 0;
    while (first < pieces.size() && pieces[first].offset + pieces[first].length <= offset) ++first;
    if (first == pieces.size() || offset < pieces[first].offset) return false;
    uint64_t covered = pieces[first].offset;
    for (size_t i = first; i < pieces.size() && pieces[i].offset == covered && covered < end; ++i) {
      covered += pieces[i].length;
    }
    if (covered < end) return false;
    // The pieces the reads passed by are no longer needed.
    for (; first > 0; --first) {
      pieces.pop_front();  // waits for it, if in flight
      if (plan->launched > 0) --plan->launched;
    }
    for (uint64_t at = offset; at < end;) {
      if (plan->launched == 0) Launch(*plan);
      Piece& piece = pieces.front();
      try {
        if (piece.done.valid()) piece.done.get();  // its GET's error, if any (once: then invalid)
      } catch (...) {
        DropPlan();
        throw;
      }
      const uint64_t take = std::min(end, piece.offset + piece.length) - at;
      std::memcpy(dst.data() + (at - offset), piece.bytes.get() + (at - piece.offset), take);
      at += take;
      if (at == piece.offset + piece.length) {
        GiveBuffer(std::move(piece.bytes));
        pieces.pop_front();
        --plan->launched;
      }
      const int parallel = std::max(1, client_.config().parallel);
      while (plan->launched < static_cast<size_t>(parallel) && plan->launched < pieces.size()) {
        Launch(*plan);
      }
    }
    if (pieces.empty()) DropPlan();
    return true;
  }

  S3Env::Client& client_;
  std::string path_;
  ObjectName object_;
  uint64_t size_;
  mutable std::mutex mu_;  // the read-ahead window
  mutable std::vector<std::byte> ahead_;
  mutable uint64_t ahead_offset_ = 0;
  mutable uint64_t next_ = UINT64_MAX;  // where the last small read ended
  mutable uint64_t window_ = 0;
  // WillRead's plans, a thread's each; declared last: destroyed (their
  // pieces in flight waited for) before what those use.
  // Once a reader hinted a large read (WillRead, kPlannedBytes), it drives
  // the file: its reads outside the hints are checksums and small chunks,
  // each asked for exactly, and the sequential read-ahead, which interleaved
  // hinting threads set off and then fetched again, is off. (Small hints
  // leave it on: a resharded load of small chunks reads the same few
  // windows for many runs.)
  mutable std::atomic<bool> hinted_{false};
  mutable std::mutex plans_mu_;  // plans_, free_
  mutable std::vector<std::unique_ptr<std::byte[]>> free_;
  mutable std::map<std::thread::id, std::unique_ptr<Plan>> plans_;
};

}  // namespace

S3Config S3ConfigFromEnvironment() {
  S3Config config;
  std::string profile = GetEnv("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  const std::string credentials_file = HomeFile("AWS_SHARED_CREDENTIALS_FILE", "credentials");
  const std::string config_file = HomeFile("AWS_CONFIG_FILE", "config");
  std::map<std::string, std::string> credentials = IniSection(credentials_file, profile);
  std::map<std::string, std::string> profile_config =
      IniSection(config_file, profile == "default" ? profile : "profile " + profile);
  config.access_key = GetEnv("AWS_ACCESS_KEY_ID");
  config.secret_key = GetEnv("AWS_SECRET_ACCESS_KEY");
  config.session_token = GetEnv("AWS_SESSION_TOKEN");
  if (config.access_key.empty() && config.secret_key.empty()) {
    config.access_key = credentials["aws_access_key_id"];
    config.secret_key = credentials["aws_secret_access_key"];
    config.session_token = credentials["aws_session_token"];
  }
  if (config.access_key.empty() || config.secret_key.empty()) {
    Fail(ErrorKind::kInvalidArgument,
         "s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
         "aws_access_key_id and aws_secret_access_key in profile [{}] of {}",
         profile, credentials_file.empty() ? "~/.aws/credentials" : credentials_file);
  }
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (config.region = GetEnv(name); !config.region.empty()) break;
  }
  if (config.region.empty()) config.region = profile_config["region"];
  if (config.region.empty()) config.region = "us-east-1";
  config.endpoint = GetEnv("AWS_ENDPOINT_URL_S3");
  if (config.endpoint.empty()) config.endpoint = GetEnv("AWS_ENDPOINT_URL");
  if (config.endpoint.empty()) config.endpoint = profile_config["endpoint_url"];
  if (config.endpoint.empty())
    config.endpoint = fmt::format("https://s3.{}.amazonaws.com", config.region);
  while (!config.endpoint.empty() && config.endpoint.back() == '/') config.endpoint.pop_back();
  config.retries = EnvInt("DISTCKPT_S3_RETRIES", config.retries, 0, 100);
  config.part_bytes = static_cast<uint64_t>(EnvInt("DISTCKPT_S3_PART_MIB", 16, 5, 4096)) << 20;
  config.parallel = EnvInt("DISTCKPT_S3_PARALLEL", config.parallel, 1, 64);
  return config;
}

S3Env::S3Env(S3Config config)
    : config_(std::move(config)), client_(std::make_unique<Client>(config_, counters_)) {}

S3Env::~S3Env() = default;

EnvCapabilities S3Env::capabilities() const {
  EnvCapabilities c;
  c.atomic_rename = false;
  c.write_at = false;
  c.locks = false;
  c.whole_file_writes = true;
  return c;
}

std::unique_ptr<WritableFile> S3Env::NewWritableFile(const std::string& path) {
  ObjectName object = ParseS3Path(path);
  if (object.key.empty()) FailIo("open", path, EISDIR);
  return std::make_unique<S3WritableFile>(*client_, path, std::move(object));
}

std::unique_ptr<RandomAccessFile> S3Env::NewRandomAccessFile(const std::string& path) {
  ObjectName object = ParseS3Path(path);
  std::optional<uint64_t> size = client_->Head(path, object);
  if (!size) FailIo("open", path, IsDirectory(path) ? EISDIR : ENOENT);
  return std::make_unique<S3RandomAccessFile>(*client_, path, std::move(object), *size);
}

bool S3Env::FileExists(const std::string& path) {
  ObjectName object = ParseS3Path(path);
  return client_->Head(path, object).has_value() || IsDirectory(path);
}

bool S3Env::IsDirectory(const std::string& path) {
  ObjectName object = ParseS3Path(path);
  const std::string prefix = object.key.empty() ? "" : object.key + "/";
  Client::Listing page = client_->List(path, object.bucket, prefix, true, "", 1);
  return object.key.empty() || !page.keys.empty() || !page.prefixes.empty();
}

uint64_t S3Env::FileSize(const std::string& path) {
  ObjectName object = ParseS3Path(path);
  std::optional<uint64_t> size = client_->Head(path, object);
  if (!size) FailIo("stat", path, ENOENT);
  return *size;
}

std::vector<std::string> S3Env::ListDir(const std::string& dir) {
  ObjectName object = ParseS3Path(dir);
  const std::string prefix = object.key.empty() ? "" : object.key + "/";
  std::vector<std::string> names;
  bool exists = object.key.empty();
  std::string token;
  do {
    Client::Listing page = client_->List(dir, object.bucket, prefix, true, token);
    for (const std::string& key : page.keys) {
      exists = true;
      if (key.size() > prefix.size()) names.push_back(key.substr(prefix.size()));  // not the marker
    }
    for (const std::string& p : page.prefixes) {
      exists = true;
      std::string name = p.substr(prefix.size());
      while (!name.empty() && name.back() == '/') name.pop_back();
      if (!name.empty()) names.push_back(name);
    }
    token = page.next;
  } while (!token.empty());
  if (!exists) FailIo("list directory", dir, ENOENT);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

void S3Env::CreateDirs(const std::string& dir) {
  ObjectName object = ParseS3Path(dir);
  if (object.key.empty() || IsDirectory(dir)) return;
  object.key += "/";  // the marker of an empty directory
  client_->Put(dir, object, {});
}

void S3Env::RemoveFile(const std::string& path) {
  ObjectName object = ParseS3Path(path);
  if (!client_->Head(path, object)) FailIo("remove", path, ENOENT);
  client_->Delete(path, object);
}

void S3Env::RemoveAll(const std::string& path) {
  ObjectName object = ParseS3Path(path);
  std::vector<std::string> keys = client_->AllKeys(path, object);
  if (!object.key.empty()) keys.push_back(object.key);
  ParallelFor(keys.size(), config_.parallel * 2, [&](size_t i) {
    client_->Delete(path, ObjectName{object.bucket, keys[i]});
  });
}

void S3Env::RenameFile(const std::string& from, const std::string& to) {
  RequireCapability(this, EnvCapability::kAtomicRename, fmt::format("rename {} to {}", from, to));
}

S3Env* DefaultS3Env() {
  static S3Env* env = new S3Env(S3ConfigFromEnvironment());
  return env;
}

}  // namespace distckpt
