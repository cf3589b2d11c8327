// Redis-specific tests: URL parsing, options, strict reply decoding, real lease and ttl
// expiry by the server's clock, clock skew, the stored record against the pure function.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "idempotency/errors.h"
#include "idempotency/record.h"
#include "idempotency/redis_lock.h"
#include "private_redis.h"
#include "redis_connection.h"
#include "redis_internal.h"
#include "redis_test_util.h"
#include "support/server_clock_checks.h"

namespace idempotency::testing {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kUrlPassword = "s3cr3t-PW";

// ---------------------------------------------------------------- URL parsing

TEST(RedisUrl, ParsesEveryForm) {
  RedisEndpoint a = parse_redis_url("redis://cache.internal:6380/2");
  EXPECT_EQ(a.host, "cache.internal");
  EXPECT_EQ(a.port, 6380);
  EXPECT_EQ(a.db, 2);
  EXPECT_EQ(a.user, "");
  EXPECT_EQ(a.password, "");

  RedisEndpoint b = parse_redis_url("redis://alice:p%40ss:w@10.0.0.3:7000");
  EXPECT_EQ(b.user, "alice");
  EXPECT_EQ(b.password, "p@ss:w");
  EXPECT_EQ(b.host, "10.0.0.3");
  EXPECT_EQ(b.port, 7000);
  EXPECT_EQ(b.db, 0);

  RedisEndpoint c = parse_redis_url("redis://:pw@localhost");
  EXPECT_EQ(c.user, "");
  EXPECT_EQ(c.password, "pw");
  EXPECT_EQ(c.port, 6379);

  RedisEndpoint d = parse_redis_url("redis://[::1]:6390/15");
  EXPECT_EQ(d.host, "::1");
  EXPECT_EQ(d.port, 6390);
  EXPECT_EQ(d.db, 15);

  RedisEndpoint e = parse_redis_url("redis://h:1/");
  EXPECT_EQ(e.db, 0);
  EXPECT_FALSE(e.tls);
  EXPECT_FALSE(e.pipelines);

  EXPECT_EQ(parse_redis_url("redis://h:1?pipelines=0").pipelines, std::size_t{0});
  EXPECT_EQ(parse_redis_url("rediss://h:1?pipelines=64").pipelines, std::size_t{64});
  EXPECT_EQ(parse_redis_url("redis+cluster://h:1,h:2?pipelines=1").pipelines, std::size_t{1});
}

TEST(RedisUrl, ParsesTheTlsForm) {
  RedisEndpoint a = parse_redis_url("rediss://:pw@10.0.0.3:6378/1");
  ASSERT_TRUE(a.tls);
  EXPECT_EQ(a.host, "10.0.0.3");
  EXPECT_EQ(a.port, 6378);
  EXPECT_EQ(a.db, 1);
  EXPECT_EQ(a.password, "pw");
  EXPECT_EQ(a.tls->ca_file, "");  // the system's trust store
  EXPECT_EQ(a.tls->cert_file, "");
  EXPECT_EQ(a.tls->server_name, "");
  EXPECT_TRUE(a.tls->verify_host);

  RedisEndpoint b = parse_redis_url(
      "rediss://alice:p%40ss@[::1]:7000?ca=/etc/ca%20dir/ca.pem&cert=/c.pem&key=/k.pem"
      "&sni=redis.internal&verify=ca");
  ASSERT_TRUE(b.tls);
  EXPECT_EQ(b.user, "alice");
  EXPECT_EQ(b.password, "p@ss");
  EXPECT_EQ(b.host, "::1");
  EXPECT_EQ(b.tls->ca_file, "/etc/ca dir/ca.pem");
  EXPECT_EQ(b.tls->cert_file, "/c.pem");
  EXPECT_EQ(b.tls->key_file, "/k.pem");
  EXPECT_EQ(b.tls->server_name, "redis.internal");
  EXPECT_FALSE(b.tls->verify_host);
  EXPECT_TRUE(parse_redis_url("rediss://h?verify=full").tls->verify_host);
}

TEST(RedisUrl, MalformedUrlsNameThePartAndNeverThePassword) {
  const std::string pw = kUrlPassword;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://u:" + pw + "@h:1", "scheme"},
      {"rediss://u:" + pw + "@h:1?cert=/c.pem", "cert= and key="},
      {"rediss://u:" + pw + "@h:1?key=/k.pem", "cert= and key="},
      {"rediss://u:" + pw + "@h:1?ca=", "ca= needs a path"},
      {"rediss://u:" + pw + "@h:1?sni=", "sni= needs a name"},
      {"rediss://u:" + pw + "@h:1?verify=none", "verify= must be full or ca"},
      {"rediss://u:" + pw + "@h:1?cafile=/x", "'cafile' is not known"},
      {"redis://u:" + pw + "@h:1?ca=/x", "need rediss://"},
      {"rediss://u:p?" + pw + "@h:1", "percent-encoded"},
      {"rediss://u:" + pw + "@h:1#x", "fragments"},
      {"redis://u:" + pw + "@h:port", "port"},
      {"redis://u:" + pw + "@h:70000", "port"},
      {"redis://u:" + pw + "@h:0", "port"},
      {"redis://u:" + pw + "@h:", "port"},
      {"redis://u:" + pw + "@:6379", "host"},
      {"redis://u:" + pw + "@h:6379/x", "database"},
      {"redis://u:" + pw + "@h:6379/-1", "database"},
      {"redis://u:" + pw + "@h:6379?db=1", "query"},
      {"redis://u:" + pw + "@h:6379?pipelines=65", "pipelines= count"},
      {"redis://u:" + pw + "@h:6379?pipelines=x", "pipelines= count"},
      {"redis://u:" + pw + "@h:6379?replicas=1&pipelines=2", "not used with replicas="},
      {"redis://" + pw + "@h:6379", "userinfo"},
      {"redis://u:" + pw + "%zz@h:6379", "percent-encoding"},
      {"redis://u:@h:6379", "password"},
      {"redis://u:" + pw + "@[::1:6379", "IPv6"},
      {"", "scheme"},
  };
  for (const auto& [url, part] : cases) {
    SCOPED_TRACE(part);
    try {
      (void)parse_redis_url(url);
      ADD_FAILURE() << "accepted a malformed URL";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(part));
      EXPECT_THAT(e.what(), Not(HasSubstr(pw)));
    }
    // The constructor rejects it the same way, before any connection.
    EXPECT_THROW(RedisLock lock(url), std::invalid_argument);
  }
}

TEST(RedisOptionsTest, BadOptionsAreRejected) {
  const std::string url = "redis://127.0.0.1:1";
  EXPECT_THROW(RedisLock(url, RedisOptions{.pool_size = 0}), std::invalid_argument);
  EXPECT_THROW(RedisLock(url, RedisOptions{.pool_wait = milliseconds(-1)}), std::invalid_argument);
  EXPECT_THROW(RedisLock(url, RedisOptions{.connect_timeout = milliseconds(0)}),
               std::invalid_argument);
  EXPECT_THROW(RedisLock(url, RedisOptions{.command_timeout = milliseconds(-1)}),
               std::invalid_argument);
  EXPECT_THROW(RedisLock(url, RedisOptions{.backend = {.ttl = milliseconds(0)}}),
               std::invalid_argument);
}

// ---------------------------------------------------------------- reply decoding

redis_detail::ReplyPtr resp(std::string_view bytes) { return redis_detail::reply_from_resp(bytes); }

TEST(RedisReply, DecodesEveryDocumentedShape) {
  using redis_detail::decode_claim_reply;
  ClaimResult w = decode_claim_reply(resp("*3\r\n$3\r\nwon\r\n:7\r\n:1234\r\n").get(), "k", "tok");
  ASSERT_TRUE(std::holds_alternative<Won>(w));
  EXPECT_EQ(std::get<Won>(w).claim.fence, 7);
  EXPECT_EQ(to_millis(std::get<Won>(w).claim.lease_expiry), 1234);
  EXPECT_EQ(std::get<Won>(w).claim.claim_token, "tok");
  EXPECT_EQ(std::get<Won>(w).claim.key, "k");

  ClaimResult d =
      decode_claim_reply(resp("*4\r\n$4\r\ndone\r\n$0\r\n\r\n$-1\r\n:5678\r\n").get(), "k", "tok");
  ASSERT_TRUE(std::holds_alternative<AlreadyDone>(d));
  EXPECT_EQ(std::get<AlreadyDone>(d).result, std::optional<std::string>(""));
  EXPECT_EQ(std::get<AlreadyDone>(d).fingerprint, std::nullopt);
  EXPECT_EQ(std::get<AlreadyDone>(d).expires_at, std::optional<TimePoint>(from_millis(5678)));

  ClaimResult h =
      decode_claim_reply(resp("*3\r\n$4\r\nheld\r\n:99\r\n$2\r\nfp\r\n").get(), "k", "t");
  ASSERT_TRUE(std::holds_alternative<HeldByOther>(h));
  EXPECT_EQ(to_millis(std::get<HeldByOther>(h).lease_expiry), 99);
  EXPECT_EQ(std::get<HeldByOther>(h).fingerprint, std::optional<std::string>("fp"));

  EXPECT_TRUE(redis_detail::decode_flag_reply(resp("$10\r\ncomplete:1\r\n").get(), "complete"));
  EXPECT_FALSE(redis_detail::decode_flag_reply(resp("$9\r\nrelease:0\r\n").get(), "release"));
}

// Redis 6.2 and later quote an unknown command's first arguments (EVALSHA's key among them,
// where EVALSHA is renamed away): the error passes on the server's message without them.
TEST(RedisReply, AnErrorNeverEchoesTheCommandsArguments) {
  const auto r = resp(
      "-ERR unknown command 'EVALSHA', with args beginning with: 'ab12' '1' "
      "'idempotency:secret-key' \r\n");
  try {
    redis_detail::throw_reply_error(r.get(), "script failed");
    FAIL() << "no StoreError";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), ::testing::Not(::testing::HasSubstr("secret-key")));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("unknown command 'EVALSHA'"));
  }
}

// A TIME reply is read only within 64 bits of milliseconds: a broken server's (or proxy's)
// huge seconds are "no time", never an overflow.
TEST(RedisReply, ATimeReplyIsReadOnlyWithinRange) {
  using redis_detail::server_millis;
  EXPECT_EQ(server_millis(resp("*2\r\n$10\r\n1700000000\r\n$6\r\n123456\r\n").get()),
            std::optional<Millis>(1'700'000'000'123));
  EXPECT_EQ(server_millis(resp("*2\r\n$19\r\n9223372036854775807\r\n$1\r\n0\r\n").get()),
            std::nullopt);
  EXPECT_EQ(server_millis(resp("*2\r\n$1\r\n1\r\n$7\r\n1000000\r\n").get()), std::nullopt);
  EXPECT_EQ(server_millis(resp("*2\r\n$2\r\n-1\r\n$1\r\n0\r\n").get()), std::nullopt);
  EXPECT_EQ(server_millis(resp(":5\r\n").get()), std::nullopt);
}

// Commands are formatted by our own RESP writer: byte for byte what hiredis's formatter makes,
// for every shape a command can have, appended after what the buffer held.
TEST(RedisConnection, FormatsCommandsByteForByteAsHiredis) {
  const std::string binary("a\r\nb\0c$*\n", 9);
  const std::string big(100'000, 'x');
  std::vector<std::vector<std::string>> commands = {
      {},
      {"PING"},
      {""},
      {"SET", "k", binary},
      {"EVALSHA", std::string(40, 'f'), "1", "idempotency:k", "claim", "", "token", "60000",
       "3600000", "-"},
      {"SET", "k", big},
  };
  std::vector<std::string> many;
  for (int i = 0; i < 40; ++i) many.push_back(std::to_string(i * 1'000'003));
  commands.push_back(many);
  for (const std::vector<std::string>& command : commands) {
    SCOPED_TRACE(command.size());
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    std::vector<std::string_view> args;
    for (const std::string& a : command) {
      argv.push_back(a.data());
      lens.push_back(a.size());
      args.emplace_back(a);
    }
    char* raw = nullptr;
    const int size =
        redisFormatCommandArgv(&raw, static_cast<int>(argv.size()), argv.data(), lens.data());
    ASSERT_GT(size, 0);
    const std::string expected(raw, static_cast<std::size_t>(size));
    redisFreeCommand(raw);
    std::string out = "queued-before";
    ASSERT_TRUE(redis_detail::Connection::format(args, out));
    EXPECT_EQ(out, "queued-before" + expected);
  }
}

TEST(RedisReply, UnexpectedShapesAreStoreErrorsNeverGuesses) {
  const std::vector<std::string> bad_claims = {
      ":1\r\n",                                         // an integer
      "+OK\r\n",                                        // a status
      "$-1\r\n",                                        // nil
      "*0\r\n",                                         // empty array
      "*2\r\n$3\r\nwon\r\n:1\r\n",                      // too short
      "*4\r\n$3\r\nwon\r\n:1\r\n:2\r\n:3\r\n",          // too long
      "*3\r\n$3\r\nWON\r\n:1\r\n:2\r\n",                // unknown tag
      "*3\r\n$3\r\nwon\r\n$1\r\nx\r\n:2\r\n",           // fence not a number
      "*3\r\n$3\r\nwon\r\n:0\r\n:2\r\n",                // fence below 1
      "*3\r\n$3\r\nwon\r\n$1\r\n1\r\n:2\r\n",           // fence as a string
      "*3\r\n$3\r\nwon\r\n:1\r\n$-1\r\n",               // lease missing
      "*3\r\n$4\r\nheld\r\n$2\r\n99\r\n$-1\r\n",        // lease as a string
      "*4\r\n$4\r\ndone\r\n:5\r\n$-1\r\n:9\r\n",        // result as an integer
      "*4\r\n$4\r\ndone\r\n*0\r\n$-1\r\n:9\r\n",        // result as an array
      "*3\r\n$4\r\ndone\r\n$1\r\nr\r\n$-1\r\n",         // expires_at missing
      "*4\r\n$4\r\ndone\r\n$1\r\nr\r\n$-1\r\n$-1\r\n",  // expires_at nil
  };
  for (const auto& bytes : bad_claims) {
    SCOPED_TRACE(bytes);
    try {
      (void)redis_detail::decode_claim_reply(resp(bytes).get(), "secret-key-123", "t");
      ADD_FAILURE() << "decoded an unexpected shape";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), Not(HasSubstr("secret-key-123")));
    }
  }
  const std::vector<std::string> bad_flags = {
      ":1\r\n",
      "$9\r\nrelease:1\r\n",             // another operation's name
      "$10\r\ncomplete:2\r\n",           // not 0 or 1
      "$11\r\ncomplete:10\r\n",          // a longer number
      "$10\r\ncomplete;1\r\n",           // no colon
      "$8\r\ncomplete\r\n",              // no flag
      "+complete:1\r\n",                 // a status, not the script's bulk string
      "*2\r\n$8\r\ncomplete\r\n:1\r\n",  // the table reply of an earlier script
      "$-1\r\n",
  };
  for (const auto& bytes : bad_flags) {
    SCOPED_TRACE(bytes);
    EXPECT_THROW((void)redis_detail::decode_flag_reply(resp(bytes).get(), "complete"), StoreError);
  }
  // A record as SET NX GET returns it, in each of its forms, or nullopt for the script to judge.
  using redis_detail::decode_stored_record;
  const auto done = decode_stored_record(std::string("D 3 10 20 3 2 6\ntokfpresult"), -1);
  ASSERT_TRUE(done);
  EXPECT_FALSE(done->fresh_form);
  EXPECT_EQ(done->record, (Record{.state = RecordState::kDone,
                                  .fence = 3,
                                  .lease_expiry = 10,
                                  .expires_at = 20,
                                  .claim_token = "tok",
                                  .result = "result",
                                  .fingerprint = "fp"}));
  const auto bare = decode_stored_record(std::string("D 1 10 20 3 -1 -1\ntok"), -1);
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->record.result, std::nullopt);
  EXPECT_EQ(bare->record.fingerprint, std::nullopt);
  const auto claimed = decode_stored_record(std::string("C 12 -5 20 0 0 -1\n"), -1);
  ASSERT_TRUE(claimed);
  EXPECT_EQ(claimed->record, (Record{.state = RecordState::kClaimed,
                                     .fence = 12,
                                     .lease_expiry = -5,
                                     .expires_at = 20,
                                     .claim_token = "",
                                     .result = std::nullopt,
                                     .fingerprint = ""}));
  // The fresh form: fence 1, its expiry the key's, its lease that less the offset.
  const auto fresh = decode_stored_record(std::string("F 60000 3 2\ntokfp"), 100'000);
  ASSERT_TRUE(fresh);
  EXPECT_TRUE(fresh->fresh_form);
  EXPECT_EQ(fresh->record, (Record{.state = RecordState::kClaimed,
                                   .fence = 1,
                                   .lease_expiry = 40'000,
                                   .expires_at = 100'000,
                                   .claim_token = "tok",
                                   .result = std::nullopt,
                                   .fingerprint = "fp"}));
  EXPECT_EQ(decode_stored_record(std::string("F 60000 3 2\ntokfp"), -1), std::nullopt)
      << "a fresh form without the key's expiry";
  // A complete's of the fresh form: the full DONE form without its expires_at, which is the
  // key's expiry.
  const auto done_by_key =
      decode_stored_record(std::string("E 1 40000 3 2 6\ntokfpresult"), 100'000);
  ASSERT_TRUE(done_by_key);
  EXPECT_FALSE(done_by_key->fresh_form);
  Record by_key = done->record;
  by_key.fence = 1;
  by_key.lease_expiry = 40'000;
  by_key.expires_at = 100'000;
  EXPECT_EQ(done_by_key->record, by_key);
  const auto done_bare = decode_stored_record(std::string("E 7 -3 3 -1 -1\ntok"), 100'000);
  ASSERT_TRUE(done_bare);
  EXPECT_EQ(done_bare->record.fence, 7);
  EXPECT_EQ(done_bare->record.lease_expiry, -3);
  EXPECT_EQ(done_bare->record.result, std::nullopt);
  EXPECT_EQ(done_bare->record.fingerprint, std::nullopt);
  EXPECT_EQ(decode_stored_record(std::string("E 1 40000 3 2 6\ntokfpresult"), -1), std::nullopt)
      << "a complete's form without the key's expiry";
  const std::vector<std::string> malformed = {
      "D 0 10 20 3 -1 -1\ntok",                             // fence 0
      "D 1 10 20 3 -1 -1\ntoken",                           // longer than it says
      "D 1 10 20 3 -1 2\ntok",                              // shorter
      "D 1 10 20 3 -1\ntok",                                // a field missing
      "D 1 10 20 3 -1 -1 7\ntok",                           // one too many
      "D 1 10 20 3 -1 -1 tok",                              // no line end
      "D 1 10 x 3 -1 -1\ntok",                              // not a number
      "D 1 10 20 -3 -1 -1\n",                               // a negative length
      "D  1 10 20 3 -1 -1\ntok",                            // two spaces
      "D 01 10 20 3 -1 -1\ntok",                            // a fence with a leading zero
      "D 1 1234567890123456 20 3 -1 -1\ntok",               // over 15 digits, as the script refuses
      "D 1 10 20 999999999999999 999999999999999 -1\ntok",  // lengths past what is there
      "D 1 10 20 3 -2 -1\ntok",                             // -1 is the only absent length
      "C -1 10 20 3 -1 -1\ntok",                            // a negative fence
      "C 1 10 20 +3 -1 -1\ntok",                            // a sign the script does not read
      "F 60000 3 -1\ntokX",                                 // longer than it says
      "F -60000 3 -1\ntok",                                 // a negative offset
      "F 60000 3\ntok",                                     // a field missing
      "F 60000 3 -1 -1\ntok",                               // a result the fresh form has not
      "F 1234567890123456 3 -1\ntok",                       // over 15 digits
      "E 1 10 20 3 -1 -1\ntok",                             // an expires_at the form has not
      "E 1 10 3 -1\ntok",                                   // a field missing
      "E 0 10 3 -1 -1\ntok",                                // fence 0
      "E 1 10 3 -1 2\ntok",                                 // shorter than it says
      "E 1 1234567890123456 3 -1 -1\ntok",                  // over 15 digits
      "X 1 10 20 3 -1 -1\ntok",                             // no such form
      "",                                                   // nothing
  };
  for (const std::string& value : malformed) {
    SCOPED_TRACE(value);
    EXPECT_EQ(decode_stored_record(value, 100'000), std::nullopt);
  }
  // A server that refuses the fresh claim's commands as such, against a passing error.
  using redis_detail::refuses_fresh_claims;
  const auto ok = resp("$-1\r\n");
  const auto expiry = resp(":1780000000000\r\n");
  EXPECT_FALSE(refuses_fresh_claims(ok.get(), expiry.get()));
  EXPECT_FALSE(refuses_fresh_claims(nullptr, nullptr));
  EXPECT_TRUE(refuses_fresh_claims(
      ok.get(), resp("-ERR unknown command 'PEXPIRETIME', with args beginning with: \r\n").get()));
  EXPECT_TRUE(refuses_fresh_claims(resp("-ERR syntax error\r\n").get(), expiry.get()));
  EXPECT_TRUE(refuses_fresh_claims(
      ok.get(),
      resp("-NOPERM this user has no permissions to run the 'pexpiretime' command\r\n").get()));
  EXPECT_FALSE(refuses_fresh_claims(
      ok.get(), resp("-LOADING Redis is loading the dataset in memory\r\n").get()));
  EXPECT_FALSE(refuses_fresh_claims(
      resp("-OOM command not allowed when used memory > 'maxmemory'.\r\n").get(), expiry.get()));
  const std::optional<Record> record = redis_detail::decode_record(
      resp("*7\r\n$4\r\nDONE\r\n$1\r\n2\r\n$2\r\n10\r\n$2\r\n20\r\n$3\r\ntok\r\n"
           "$6\r\nresult\r\n$-1\r\n")
          .get());
  ASSERT_TRUE(record);
  EXPECT_EQ(record->state, RecordState::kDone);
  EXPECT_EQ(record->fence, 2);
  EXPECT_EQ(record->lease_expiry, 10);
  EXPECT_EQ(record->expires_at, 20);
  EXPECT_EQ(record->claim_token, "tok");
  EXPECT_EQ(record->result, std::optional<std::string>("result"));
  EXPECT_EQ(record->fingerprint, std::nullopt);
  EXPECT_EQ(redis_detail::decode_record(resp("$-1\r\n").get()), std::nullopt);
  EXPECT_THROW((void)redis_detail::decode_record(
                   resp("*7\r\n$4\r\nGONE\r\n$1\r\n2\r\n$2\r\n10\r\n$2\r\n20\r\n$3\r\n"
                        "tok\r\n$-1\r\n$-1\r\n")
                       .get()),
               StoreError);
  EXPECT_THROW((void)redis_detail::decode_record(
                   resp("*7\r\n$4\r\nDONE\r\n$1\r\n0\r\n$2\r\n10\r\n$2\r\n20\r\n$3\r\n"
                        "tok\r\n$-1\r\n$-1\r\n")
                       .get()),
               StoreError);
  EXPECT_THROW((void)redis_detail::decode_record(resp("*1\r\n$5\r\nstate\r\n").get()), StoreError);
  EXPECT_THROW(
      (void)redis_detail::decode_record(resp("*2\r\n$5\r\nstate\r\n$7\r\nCLAIMED\r\n").get()),
      StoreError);
}

// ---------------------------------------------------------------- against the server

TEST(RedisLockTest, UnreachableServerIsAStoreError) {
  const std::string url = "redis://127.0.0.1:" + std::to_string(free_port());
  try {
    RedisLock lock(url, RedisOptions{.connect_timeout = milliseconds(500)});
    ADD_FAILURE() << "connected to nothing";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("refused"));
  }
}

TEST(RedisLockTest, ATamperedRecordIsAStoreErrorWithoutTheKey) {
  auto lock = fixture_lock();
  RawRedis raw(fixture_redis_url());
  const std::string key = "customer-order-4711";
  Claim c = won(lock->claim(key, milliseconds(60'000)));
  // A hash (an earlier version's form) whose state is no state.
  raw.command({"DEL", lock->key_prefix() + key});
  raw.command({"HSET", lock->key_prefix() + key, "state", "BOGUS"});
  for (int op = 0; op < 3; ++op) {
    try {
      if (op == 0) (void)lock->claim(key, milliseconds(1000));
      if (op == 1) (void)lock->complete(c);
      if (op == 2) lock->release(c);
      ADD_FAILURE() << "operation " << op << " read a malformed record";
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), HasSubstr("malformed"));
      EXPECT_THAT(e.what(), Not(HasSubstr(key)));
    }
  }
  EXPECT_THROW((void)lock->inspect(key), StoreError);
  // A string that is not a record, in either form.
  for (const std::string bogus : {"x", "F 1 2 3\nab", "C 1 2 3 1 -1 -1\n", "D 0 2 3 0 -1 -1\n"}) {
    raw.command({"SET", lock->key_prefix() + key, bogus});
    try {
      (void)lock->claim(key, milliseconds(1000));
      ADD_FAILURE() << "claimed over " << bogus;
    } catch (const StoreError& e) {
      EXPECT_THAT(e.what(), HasSubstr("malformed"));
      EXPECT_THAT(e.what(), Not(HasSubstr(key)));
    }
    EXPECT_THROW((void)lock->inspect(key), StoreError);
  }
  // A key of another type: Redis's own WRONGTYPE error, still without the key.
  raw.command({"DEL", lock->key_prefix() + key});
  raw.command({"RPUSH", lock->key_prefix() + key, "x"});
  try {
    (void)lock->claim(key, milliseconds(1000));
    ADD_FAILURE() << "claimed over a list";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("WRONGTYPE"));
    EXPECT_THAT(e.what(), Not(HasSubstr(key)));
  }
}

TEST(RedisLockTest, EachRecordIsOneStringWhoseExpiryIsItsExpiresAt) {
  auto lock = fixture_lock(BackendOptions{.ttl = std::chrono::minutes(5)});
  RawRedis raw(fixture_redis_url());
  Claim c = won(lock->claim("k", milliseconds(60'000), ClaimRequest{.fingerprint = "fp"}));
  const std::string redis_key = lock->key_prefix() + "k";
  EXPECT_EQ(raw.text({"TYPE", redis_key}), "string");
  // A fresh key's claim, made without the script (a plain SET NX PX): its fresh form.
  EXPECT_EQ(raw.text({"GET", redis_key}),
            "F 300000 " + std::to_string(c.claim_token.size()) + " 2\n" + c.claim_token + "fp");
  std::optional<Record> r = lock->inspect("k");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, RecordState::kClaimed);
  EXPECT_EQ(r->fence, 1);
  EXPECT_EQ(r->lease_expiry, to_millis(c.lease_expiry));
  EXPECT_EQ(r->expires_at, r->lease_expiry + 5 * 60'000);
  EXPECT_EQ(r->claim_token, c.claim_token);
  EXPECT_EQ(r->fingerprint, std::optional<std::string>("fp"));
  EXPECT_EQ(raw.text({"PEXPIRETIME", redis_key}), std::to_string(r->expires_at));

  // Its complete: the form whose expires_at is again the key's expiry (no clock read), its
  // lease the claim's to the millisecond, its retention the ttl from the complete.
  const Millis before_complete = raw.time_ms();
  ASSERT_TRUE(lock->complete(c, "result-bytes"));
  const Millis after_complete = raw.time_ms();
  r = lock->inspect("k");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, RecordState::kDone);
  EXPECT_EQ(r->fence, 1);
  EXPECT_EQ(r->lease_expiry, to_millis(c.lease_expiry));
  EXPECT_EQ(r->claim_token, c.claim_token);
  EXPECT_EQ(r->fingerprint, std::optional<std::string>("fp"));
  EXPECT_EQ(r->result, std::optional<std::string>("result-bytes"));
  EXPECT_GE(r->expires_at, before_complete + 5 * 60'000);
  EXPECT_LE(r->expires_at, after_complete + 5 * 60'000);
  EXPECT_EQ(raw.text({"PEXPIRETIME", redis_key}), std::to_string(r->expires_at));
  EXPECT_EQ(raw.text({"GET", redis_key}), "E 1 " + std::to_string(r->lease_expiry) + " " +
                                              std::to_string(c.claim_token.size()) + " 2 12\n" +
                                              c.claim_token + "fp" + "result-bytes");
  // Completed again (a reply lost), it stays as it is; another fence does not complete it.
  ASSERT_TRUE(lock->complete(c, "other bytes"));
  EXPECT_FALSE(lock->complete(Claim{"k", 2, c.lease_expiry, c.claim_token}, "other bytes"));
  EXPECT_EQ(lock->inspect("k"), r);

  // A record the script claimed (fence 3, after a release) completes in the full form, its
  // expires_at written out.
  Claim c2 = won(lock->claim("k2", milliseconds(60'000)));
  lock->release(c2);
  c2 = won(lock->claim("k2", milliseconds(60'000)));
  ASSERT_EQ(c2.fence, 3);  // the release moved it to 2
  ASSERT_TRUE(lock->complete(c2, std::nullopt));
  std::optional<Record> r2 = lock->inspect("k2");
  ASSERT_TRUE(r2);
  EXPECT_EQ(raw.text({"GET", lock->key_prefix() + "k2"}),
            "D 3 " + std::to_string(r2->lease_expiry) + " " + std::to_string(r2->expires_at) + " " +
                std::to_string(c2.claim_token.size()) + " -1 -1\n" + c2.claim_token);
  EXPECT_EQ(raw.text({"PEXPIRETIME", lock->key_prefix() + "k2"}), std::to_string(r2->expires_at));
  EXPECT_EQ(lock->purge_expired(), 0U);
}

// The short complete takes only what SET ... PX takes: a ttl with a leading zero, which the
// general path reads as a number and SET would refuse, goes on to the general path.
TEST(RedisLockTest, TheShortCompleteLeavesWhatSetWouldRefuseToTheGeneralPath) {
  auto lock = fixture_lock(BackendOptions{.ttl = std::chrono::minutes(5)});
  RawRedis raw(fixture_redis_url());
  const std::string sha = raw.text({"SCRIPT", "LOAD", std::string(redis_detail::kScript)});
  const Claim c = won(lock->claim("lz", milliseconds(60'000)));
  const std::string redis_key = lock->key_prefix() + "lz";
  ASSERT_EQ(raw.text({"GET", redis_key}).substr(0, 2), "F ");
  EXPECT_EQ(raw.text({"EVALSHA", sha, "1", redis_key, "complete", "", "1", "0300000", "+r"}),
            "complete:1");
  const std::optional<Record> r = lock->inspect("lz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, RecordState::kDone);
  EXPECT_EQ(r->result, std::optional<std::string>("r"));
  EXPECT_EQ(r->lease_expiry, to_millis(c.lease_expiry));
  EXPECT_EQ(raw.text({"GET", redis_key}).substr(0, 2), "D ") << "the general path's form";
}

// complete_many completes each key in the fresh form (its claim's lease, its own result) and
// leaves every other key as it was, answering 0 for it: the client then sends that key's own
// complete, whose general path decides. A ttl SET would refuse leaves every key.
TEST(RedisLockTest, CompleteManyCompletesEachFreshKeyAndLeavesTheRestUntouched) {
  auto lock = fixture_lock(BackendOptions{.ttl = std::chrono::minutes(5)});
  RawRedis raw(fixture_redis_url());
  const std::string sha = raw.text({"SCRIPT", "LOAD", std::string(redis_detail::kScript)});
  const Claim a = won(lock->claim("many-a", milliseconds(60'000)));
  const Claim done = won(lock->claim("many-done", milliseconds(60'000)));
  ASSERT_TRUE(lock->complete(done, "first"));
  const Claim b = won(lock->claim("many-b", milliseconds(60'000)));
  const std::string p = lock->key_prefix();
  const std::string done_before = raw.text({"GET", p + "many-done"});
  const std::string b_before = raw.text({"GET", p + "many-b"});

  const RedisReplyPtr refused =
      raw.command({"EVALSHA", sha, "1", p + "many-b", "complete_many", "0300000", "+late"});
  ASSERT_EQ(refused->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(refused->elements, 1U);
  EXPECT_EQ(refused->element[0]->integer, 0);
  EXPECT_EQ(raw.text({"GET", p + "many-b"}), b_before);

  const RedisReplyPtr r =
      raw.command({"EVALSHA", sha, "4", p + "many-a", p + "many-absent", p + "many-done",
                   p + "many-b", "complete_many", "300000", "+ra", "+rx", "+again", "-"});
  ASSERT_EQ(r->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(r->elements, 4U);
  const std::vector<long long> flags = {r->element[0]->integer, r->element[1]->integer,
                                        r->element[2]->integer, r->element[3]->integer};
  EXPECT_EQ(flags, (std::vector<long long>{1, 0, 0, 1}));
  EXPECT_EQ(raw.text({"EXISTS", p + "many-absent"}), "0");
  EXPECT_EQ(raw.text({"GET", p + "many-done"}), done_before);
  for (const auto& [claim, result] : {std::pair{a, std::optional<std::string>("ra")},
                                      std::pair{b, std::optional<std::string>()}}) {
    EXPECT_EQ(raw.text({"GET", p + claim.key}).substr(0, 4), "E 1 ");
    const std::optional<Record> rec = lock->inspect(claim.key);
    ASSERT_TRUE(rec);
    EXPECT_EQ(rec->state, RecordState::kDone);
    EXPECT_EQ(rec->result, result);
    EXPECT_EQ(rec->lease_expiry, to_millis(claim.lease_expiry));
  }
}

// A record an earlier version stored as a hash is read as the record it is, and the next
// write stores it as a string: an upgrade neither loses a claim nor replays a stale answer.
TEST(RedisLockTest, ARecordStoredAsAHashByAnEarlierVersionIsReadAndRewritten) {
  auto lock = fixture_lock(BackendOptions{.ttl = std::chrono::minutes(5)});
  RawRedis raw(fixture_redis_url());
  const long long now = raw.time_ms();
  const std::string lease = std::to_string(now + 60'000);
  const std::string expires = std::to_string(now + 360'000);
  const std::string done_key = lock->key_prefix() + "done";
  raw.command({"HSET", done_key, "state", "DONE", "fence", "2", "lease_expiry", lease, "expires_at",
               expires, "claim_token", "t", "result", "stored", "fingerprint", "fp"});
  raw.command({"PEXPIREAT", done_key, expires});
  const ClaimResult replayed = lock->claim("done", milliseconds(60'000));
  ASSERT_TRUE(std::holds_alternative<AlreadyDone>(replayed));
  const auto& replay = std::get<AlreadyDone>(replayed);
  EXPECT_EQ(replay.result, std::optional<std::string>("stored"));
  EXPECT_EQ(replay.fingerprint, std::optional<std::string>("fp"));
  EXPECT_EQ(replay.expires_at, from_millis(now + 360'000));
  EXPECT_EQ(raw.text({"TYPE", done_key}), "hash") << "a claim that writes nothing keeps it";

  const std::string held_key = lock->key_prefix() + "held";
  raw.command({"HSET", held_key, "state", "CLAIMED", "fence", "3", "lease_expiry", lease,
               "expires_at", expires, "claim_token", "holder"});
  raw.command({"PEXPIREAT", held_key, expires});
  EXPECT_TRUE(std::holds_alternative<HeldByOther>(lock->claim("held", milliseconds(60'000))));
  const Claim holder{"held", 3, from_millis(now + 60'000), "holder"};
  ASSERT_TRUE(lock->complete(holder, "late"));
  EXPECT_EQ(raw.text({"TYPE", held_key}), "string");
  const std::optional<Record> r = lock->inspect("held");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->state, RecordState::kDone);
  EXPECT_EQ(r->fence, 3);
  EXPECT_EQ(r->lease_expiry, now + 60'000);
  EXPECT_EQ(r->result, std::optional<std::string>("late"));
  EXPECT_EQ(raw.text({"PEXPIRETIME", held_key}), std::to_string(r->expires_at));
}

// Where the fresh form cannot be used the script makes every record: an injected clock (Redis
// counts a key's expiry on its own), a connection per call (`?pipelines=0`: nothing sends two
// commands in one write), and a server without PEXPIRETIME (before Redis 7; renamed here),
// whose first refusal turns fresh claims off while the script reads the one it made by PTTL.
TEST(RedisLockTest, WhereTheFreshFormCannotBeUsedTheScriptMakesTheRecord) {
  PrivateRedis server({"--rename-command", "PEXPIRETIME", "pexpiretime-renamed"});
  RawRedis raw(server.url());
  const BackendOptions backend{.ttl = std::chrono::minutes(5)};
  RedisLock lock(server.url(), RedisOptions{.backend = backend, .key_prefix = "old:"});
  const long long before = raw.time_ms();
  const Claim first = won(lock.claim("a", milliseconds(60'000)));
  const long long after = raw.time_ms();
  EXPECT_EQ(first.fence, 1);
  // The script rebuilds the lease from the script's clock and PTTL, two whole milliseconds
  // read microseconds apart: up to 1 ms early when a millisecond turns between them (the safe
  // side: the holder counts its lease as ending sooner). ./dev test saw it once under ASan.
  EXPECT_GE(to_millis(first.lease_expiry), before + 60'000 - 1);
  EXPECT_LE(to_millis(first.lease_expiry), after + 60'000 + 1);
  EXPECT_EQ(raw.text({"GET", "old:a"}).substr(0, 9), "F 300000 ") << "the SET NX went first";
  const std::optional<Record> fresh = lock.inspect("a");
  ASSERT_TRUE(fresh);
  EXPECT_NEAR(static_cast<double>(fresh->lease_expiry),
              static_cast<double>(to_millis(first.lease_expiry)), 1.0);
  EXPECT_TRUE(std::holds_alternative<HeldByOther>(lock.claim("a", milliseconds(60'000))));
  (void)won(lock.claim("b", milliseconds(60'000)));
  EXPECT_EQ(raw.text({"GET", "old:b"}).substr(0, 4), "C 1 ") << "fresh claims are off";
  ASSERT_TRUE(lock.complete(first));
  EXPECT_EQ(raw.text({"GET", "old:a"}).substr(0, 4), "D 1 ");

  auto clock = std::make_shared<ManualClock>();
  RedisLock injected(server.url(), RedisOptions{.backend = {.ttl = backend.ttl, .clock = clock},
                                                .key_prefix = "injected:"});
  (void)won(injected.claim("a", milliseconds(60'000)));
  EXPECT_EQ(raw.text({"GET", "injected:a"}).substr(0, 4), "C 1 ");
  RedisLock per_call(server.url() + "?pipelines=0",
                     RedisOptions{.backend = backend, .key_prefix = "per-call:"});
  (void)won(per_call.claim("a", milliseconds(60'000)));
  EXPECT_EQ(raw.text({"GET", "per-call:a"}).substr(0, 4), "C 1 ");
}

// A redelivery of a completed message: SET NX GET returns the DONE record, which is the
// replay, and the script never runs.
TEST(RedisLockTest, ADoneKeysReplayComesFromItsRecordWithoutTheScript) {
  PrivateRedis server;
  RawRedis raw(server.url());
  RedisLock lock(server.url(), RedisOptions{.backend = {.ttl = std::chrono::minutes(5)}});
  const Claim c = won(lock.claim("k", milliseconds(60'000), ClaimRequest{.fingerprint = "fp"}));
  ASSERT_TRUE(lock.complete(c, "stored result"));
  ASSERT_EQ(raw.text({"CONFIG", "RESETSTAT"}), "OK");
  const ClaimResult replayed = lock.claim("k", milliseconds(60'000));
  ASSERT_TRUE(std::holds_alternative<AlreadyDone>(replayed));
  const auto& replay = std::get<AlreadyDone>(replayed);
  EXPECT_EQ(replay.result, std::optional<std::string>("stored result"));
  EXPECT_EQ(replay.fingerprint, std::optional<std::string>("fp"));
  EXPECT_EQ(replay.expires_at,
            from_millis(std::stoll(raw.text({"PEXPIRETIME", lock.key_prefix() + "k"}))));
  EXPECT_EQ(raw.text({"INFO", "commandstats"}).find("cmdstat_evalsha"), std::string::npos)
      << "the replay ran the script";
}

// A claim that finds a live holder writes nothing, so SET NX GET's record and a TIME sent
// behind it answer it, judged by the pure state machine: held, or the holder's own retry
// re-affirmed (from a record the script wrote; a fresh-form record's lease comes from another
// command, so its re-affirm is the script's). TIME goes along only after a claim met a claimed
// record: a fresh key's claim and a replay never send it. Taking over a lapsed or released
// claim writes, and that is the script's.
TEST(RedisLockTest, ALiveHolderIsAnsweredFromItsRecordWithoutTheScript) {
  PrivateRedis server;
  RawRedis raw(server.url());
  RedisLock lock(server.url(), RedisOptions{.backend = {.ttl = std::chrono::minutes(5)}});
  const auto calls = [&](const std::string& command) { return raw.calls(command); };
  const auto scripts_run = [&] { return calls("evalsha"); };
  // Every script run reads TIME once (the server's clock), but a fresh-form record's complete,
  // which reads none; the rest came from the client.
  int fresh_completes = 0;
  const auto times_sent = [&] { return calls("time") - (scripts_run() - fresh_completes); };
  ASSERT_EQ(raw.text({"CONFIG", "RESETSTAT"}), "OK");
  const Claim first =
      won(lock.claim("k", milliseconds(60'000), ClaimRequest{.claim_token = "first-holder"}));
  const Claim done = won(lock.claim("done", milliseconds(60'000)));
  ASSERT_TRUE(lock.complete(done));
  ++fresh_completes;
  ASSERT_TRUE(std::holds_alternative<AlreadyDone>(lock.claim("done", milliseconds(60'000))));
  EXPECT_EQ(times_sent(), 0) << "a fresh key's claim or a replay sent TIME";

  // The first claim to meet a holder has no TIME with it: the script answers, and the next
  // claims send TIME along.
  ASSERT_EQ(raw.text({"CONFIG", "RESETSTAT"}), "OK");
  fresh_completes = 0;
  for (int i = 0; i < 3; ++i) {
    const ClaimResult held =
        lock.claim("k", milliseconds(60'000), ClaimRequest{.fingerprint = "x"});
    ASSERT_TRUE(std::holds_alternative<HeldByOther>(held));
    EXPECT_EQ(std::get<HeldByOther>(held).lease_expiry, first.lease_expiry);
  }
  EXPECT_EQ(scripts_run(), 1) << "a fresh-form holder's key ran the script";
  EXPECT_EQ(times_sent(), 2);
  const Claim retried =
      won(lock.claim("k", milliseconds(60'000), ClaimRequest{.claim_token = "first-holder"}));
  EXPECT_EQ(retried.fence, 1);
  EXPECT_EQ(retried.lease_expiry, first.lease_expiry);
  EXPECT_EQ(scripts_run(), 2) << "a fresh-form record's own retry is the script's";

  // A lapsed claim taken over by the script: a record of its own form, fence 2.
  const Claim lapsing =
      won(lock.claim("lapsing", milliseconds(100), ClaimRequest{.claim_token = "crashed"}));
  std::optional<Claim> next;
  ASSERT_TRUE(eventually([&] {
    const ClaimResult r =
        lock.claim("lapsing", milliseconds(60'000), ClaimRequest{.claim_token = "next-holder"});
    if (const auto* w = std::get_if<Won>(&r)) next = w->claim;
    return next.has_value();
  }));
  EXPECT_EQ(next->fence, 2);
  EXPECT_EQ(raw.text({"GET", lock.key_prefix() + "lapsing"}).substr(0, 4), "C 2 ");
  ASSERT_EQ(raw.text({"CONFIG", "RESETSTAT"}), "OK");
  const Claim reaffirmed =
      won(lock.claim("lapsing", milliseconds(60'000), ClaimRequest{.claim_token = "next-holder"}));
  EXPECT_EQ(reaffirmed.fence, 2);
  EXPECT_EQ(reaffirmed.lease_expiry, next->lease_expiry);
  const ClaimResult other =
      lock.claim("lapsing", milliseconds(60'000), ClaimRequest{.claim_token = "crashed"});
  ASSERT_TRUE(std::holds_alternative<HeldByOther>(other));
  EXPECT_EQ(std::get<HeldByOther>(other).lease_expiry, next->lease_expiry);
  EXPECT_EQ(scripts_run(), 0) << "a live holder's key ran the script";
  EXPECT_FALSE(lock.complete(lapsing)) << "the lapsed holder is fenced out";

  // A released claim is taken over at once, by the script.
  lock.release(*next);
  ASSERT_EQ(raw.text({"CONFIG", "RESETSTAT"}), "OK");
  const Claim after_release =
      won(lock.claim("lapsing", milliseconds(60'000), ClaimRequest{.claim_token = "third"}));
  EXPECT_EQ(after_release.fence, 4);
  EXPECT_EQ(scripts_run(), 1);
}

TEST(RedisLockTest, DatabaseNumberFromTheUrlIsUsed) {
  const std::string url = fixture_redis_url();
  if (parse_redis_url(url).db != 0) GTEST_SKIP() << "REDIS_URL already names a database";
  RedisLock lock(url + "/3", RedisOptions{.key_prefix = unique_name("idem_db") + ":"});
  (void)won(lock.claim("k", milliseconds(60'000)));
  RawRedis raw(url);
  EXPECT_EQ(raw.text({"EXISTS", lock.key_prefix() + "k"}), "0");
  raw.command({"SELECT", "3"});
  EXPECT_EQ(raw.text({"EXISTS", lock.key_prefix() + "k"}), "1");
}

TEST(RedisLockTest, InjectedClockKeepsTheRemainingLifetimeOnTheServer) {
  // The manual clock starts in the past of the server's clock: an absolute PEXPIREAT would
  // delete the record at once. The script sets the remaining lifetime (plus 10 min of slack,
  // as Redis counts it in real time) and judges expiry by the injected clock alone.
  auto clock = std::make_shared<ManualClock>(TimePoint(milliseconds(1'000'000'000'000)));
  auto lock = fixture_lock(BackendOptions{.ttl = std::chrono::minutes(10), .clock = clock});
  RawRedis raw(fixture_redis_url());
  Claim c = won(lock->claim("k", milliseconds(60'000)));
  EXPECT_EQ(to_millis(c.lease_expiry), 1'000'000'060'000);
  const long long pttl = std::stoll(raw.text({"PTTL", lock->key_prefix() + "k"}));
  EXPECT_GT(pttl, 21 * 60'000 - 5'000);
  EXPECT_LE(pttl, 21 * 60'000);
  // Past expires_at by the injected clock the record counts as reaped: fence restarts at 1.
  clock->advance(std::chrono::minutes(11));
  EXPECT_FALSE(lock->complete(c));
  EXPECT_EQ(won(lock->claim("k", milliseconds(60'000))).fence, 1);
}

// ---------------------------------------------------------------- the server's clock, for real

TEST(RedisServerClock, ALeaseLapsesForRealAndIsReclaimedWithFencePlusOne) {
  // The lease outlasts the next call on a slow box (HeldByOther); the ttl keeps the record
  // well past the lease, so the reclaim finds it (fence + 1).
  auto lock = fixture_lock(BackendOptions{.ttl = milliseconds(5000)});
  const milliseconds lease(1000);
  // Before the claim: the lease runs from when the server ran it, not from its reply.
  const auto started = std::chrono::steady_clock::now();
  Claim first = won(lock->claim("k", lease));
  EXPECT_EQ(outcome(lock->claim("k", lease)), std::string("HeldByOther"));
  std::optional<Claim> second;
  ASSERT_TRUE(eventually([&] {
    ClaimResult r = lock->claim("k", lease);
    if (std::holds_alternative<Won>(r)) second = std::get<Won>(r).claim;
    return second.has_value();
  }));
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_GE(waited, lease - milliseconds(50)) << "reclaimed before the lease lapsed";
  EXPECT_EQ(second->fence, first.fence + 1) << "the record outlives its lease by the ttl";
  EXPECT_GE(second->lease_expiry, first.lease_expiry + lease);
  EXPECT_FALSE(lock->complete(first)) << "the lapsed holder is fenced out";
  EXPECT_TRUE(lock->complete(*second));
}

TEST(RedisServerClock, TheTtlEndsForRealAndRedisReapsTheRecord) {
  // Long enough that the duplicate, one call after the complete, still finds it done.
  auto lock = fixture_lock(BackendOptions{.ttl = milliseconds(1000)});
  RawRedis raw(fixture_redis_url());
  Claim c = won(lock->claim("k", milliseconds(200)));
  ASSERT_TRUE(lock->complete(c, "r"));
  ClaimResult dup = lock->claim("k", milliseconds(200));
  ASSERT_TRUE(std::holds_alternative<AlreadyDone>(dup));
  EXPECT_EQ(std::get<AlreadyDone>(dup).result, std::optional<std::string>("r"));
  // No call touches the key: Redis deletes it by itself at expires_at.
  const std::string redis_key = lock->key_prefix() + "k";
  ASSERT_TRUE(eventually([&] { return raw.text({"EXISTS", redis_key}) == "0"; }));
  EXPECT_EQ(won(lock->claim("k", milliseconds(200))).fence, 1);
}

TEST(RedisServerClock, AReleasedClaimIsNotReaffirmedByItsToken) {
  auto lock = fixture_lock();
  expect_released_claim_not_reaffirmed(*lock, "k");
}

TEST(RedisServerClock, ClientClockSkewCannotBreakALease) {
  // Two instances, as on two hosts. Neither reads its own clock: the lease is judged by the
  // server's TIME alone, so a client whose wall clock runs hours ahead still sees the lease.
  RawRedis raw(fixture_redis_url());
  auto a = fixture_lock();
  auto b =
      std::make_unique<RedisLock>(fixture_redis_url(), RedisOptions{.key_prefix = a->key_prefix()});
  const long long before = raw.time_ms();
  Claim held = won(a->claim("k", milliseconds(60'000)));
  const long long after = raw.time_ms();
  EXPECT_GE(to_millis(held.lease_expiry), before + 60'000);
  EXPECT_LE(to_millis(held.lease_expiry), after + 60'000);
  ClaimResult other = b->claim("k", milliseconds(60'000));
  ASSERT_TRUE(std::holds_alternative<HeldByOther>(other));
  EXPECT_EQ(std::get<HeldByOther>(other).lease_expiry, held.lease_expiry);
  // Only a clock the caller explicitly injects is believed (tests); it is never the default.
  EXPECT_TRUE(a->complete(held));
}

// ---------------------------------------------------------------- wait_for_change

TEST(RedisWaitForChange, AWaiterInAnotherInstanceWakesWhenTheHolderCompletes) {
  auto holder = fixture_lock();
  RedisLock waiter(fixture_redis_url(), RedisOptions{.key_prefix = holder->key_prefix()});
  Claim c = won(holder->claim("k", std::chrono::minutes(1)));
  std::thread completer([&] {
    std::this_thread::sleep_for(milliseconds(200));
    EXPECT_TRUE(holder->complete(c, "r"));
  });
  const auto start = std::chrono::steady_clock::now();
  waiter.wait_for_change("k", std::chrono::seconds(20), std::stop_token());
  const auto waited = std::chrono::steady_clock::now() - start;
  completer.join();
  EXPECT_LT(waited, std::chrono::seconds(5)) << "slept instead of being notified";
  EXPECT_EQ(outcome(waiter.claim("k", std::chrono::minutes(1))), std::string("AlreadyDone"));
}

TEST(RedisWaitForChange, ReturnsAtOnceForASettledRecordAndHonoursTimeoutAndStop) {
  auto lock = fixture_lock();
  auto start = std::chrono::steady_clock::now();
  lock->wait_for_change("absent", std::chrono::seconds(20), std::stop_token());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  (void)won(lock->claim("held", std::chrono::minutes(1)));
  start = std::chrono::steady_clock::now();
  lock->wait_for_change("held", milliseconds(300), std::stop_token());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(250));

  std::stop_source stop;
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(100));
    stop.request_stop();
  });
  start = std::chrono::steady_clock::now();
  lock->wait_for_change("held", std::chrono::seconds(20), stop.get_token());
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// ---------------------------------------------------------------- the pure function, records too

TEST(RedisDifferential, StoredRecordsMatchThePureFunction) {
  constexpr Millis kTtl = 300;
  auto clock = std::make_shared<ManualClock>();
  auto lock = fixture_lock(BackendOptions{.ttl = milliseconds(kTtl), .clock = clock});
  std::map<std::string, std::optional<Record>> model;
  std::vector<Claim> claims;
  std::mt19937 rng(20261130);
  const std::vector<std::string> keys = {"a", "b", std::string("\xff\x00 bin", 6)};
  const std::vector<Millis> steps = {0, 1, 49, 50, 100, 299, 300, 301};
  int tokens = 0;
  for (int step = 0; step < 600; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Millis now = to_millis(clock->now());
    const std::string key = keys[rng() % keys.size()];
    std::optional<Record>& slot = model[key];
    if (slot && now >= slot->expires_at) slot.reset();  // Redis reaps at expires_at
    switch (rng() % 5) {
      case 0:
      case 1: {
        std::string token = "t" + std::to_string(++tokens);
        if (!claims.empty() && rng() % 3 == 0) token = claims[rng() % claims.size()].claim_token;
        const Millis lease = 50 + static_cast<Millis>(rng() % 3) * 100;
        std::optional<std::string> fp;
        if (rng() % 2) fp = std::string(rng() % 3, 'f');
        Transition t = transition(slot, ClaimOp{token, lease, kTtl, fp}, now);
        ClaimResult r = lock->claim(key, milliseconds(lease), ClaimRequest{token, fp});
        const ClaimAnswer expected = *t.answer.claim;
        ASSERT_EQ(std::holds_alternative<Won>(r), expected == ClaimAnswer::kWon);
        ASSERT_EQ(std::holds_alternative<AlreadyDone>(r), expected == ClaimAnswer::kAlreadyDone);
        if (auto* w = std::get_if<Won>(&r)) {
          EXPECT_EQ(w->claim.fence, t.record->fence);
          EXPECT_EQ(to_millis(w->claim.lease_expiry), t.record->lease_expiry);
          claims.push_back(w->claim);
        }
        slot = t.record;
        break;
      }
      case 2: {
        if (claims.empty()) break;
        const Claim c = claims[rng() % claims.size()];
        std::optional<Record>& s = model[c.key];
        if (s && now >= s->expires_at) s.reset();
        std::optional<std::string> result;
        if (rng() % 2) result = std::string(rng() % 4, 'r');
        Transition t = transition(s, CompleteOp{c.fence, result, kTtl}, now);
        EXPECT_EQ(lock->complete(c, result), t.answer.ok);
        s = t.record;
        break;
      }
      case 3: {
        if (claims.empty()) break;
        const Claim c = claims[rng() % claims.size()];
        std::optional<Record>& s = model[c.key];
        if (s && now >= s->expires_at) s.reset();
        Transition t = transition(s, ReleaseOp{c.fence, kTtl}, now);
        lock->release(c);
        s = t.record;
        break;
      }
      case 4:
        clock->advance(milliseconds(steps[rng() % steps.size()]));
        break;
    }
    // The stored record equals the model's (a record past expires_at counts as absent).
    const Millis at = to_millis(clock->now());
    for (const auto& k : keys) {
      std::optional<Record> stored = lock->inspect(k);
      if (stored && at >= stored->expires_at) stored.reset();
      std::optional<Record> expected = model[k];
      if (expected && at >= expected->expires_at) expected.reset();
      ASSERT_EQ(stored.has_value(), expected.has_value()) << "key #" << k.size();
      if (stored) {
        ASSERT_EQ(*stored, *expected);
      }
    }
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace idempotency::testing
