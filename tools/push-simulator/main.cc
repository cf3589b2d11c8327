// pubsub-push-sim: an at-least-once Pub/Sub push simulator. Flags: --help, and the README
// section "Try your endpoint with pubsub-push-sim before production does".
//
// Exit codes: 0 when every message was acked or dead-lettered; 1 when some were neither by
// --run-timeout (their count is printed) or the run failed; 2 for a bad flag or input file
// (one line on stderr naming it).
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <variant>

#include "event_log.h"
#include "message_source.h"
#include "oidc_signer.h"
#include "options.h"
#include "scheduler.h"
#include "summary.h"

namespace sim = idempotency::push_sim;

namespace {

constexpr const char* kProgram = "pubsub-push-sim";

int fail(int code, const std::string& line) {
  std::fprintf(stderr, "%s: %s\n", kProgram, line.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // An endpoint that closes a connection mid-write must be a nack, not a dead simulator.
  signal(SIGPIPE, SIG_IGN);  // NOLINT(cert-err33-c): the previous handler is of no interest

  auto parsed = sim::parse_options(argc, argv);
  if (auto* exit = std::get_if<sim::OptionsExit>(&parsed)) {
    if (exit->code == 0) {
      std::fputs(exit->text.c_str(), stdout);
      return 0;
    }
    return fail(exit->code, exit->text);
  }
  const sim::Options options = std::get<sim::Options>(std::move(parsed));
  const std::uint64_t seed = options.seed ? *options.seed : std::random_device{}();
  std::mt19937_64 random(seed);

  std::vector<sim::SimMessage> messages;
  if (!options.input.empty()) {
    std::ifstream in(options.input);
    if (!in) return fail(2, "--input: cannot read '" + options.input + "'");
    try {
      messages = sim::read_messages(in, options.attributes, options.ordering_keys, random);
    } catch (const sim::InputError& e) {
      return fail(2, e.what());
    }
  } else {
    messages = sim::generate_messages({.count = options.messages,
                                       .attributes = options.attributes,
                                       .key_attribute = options.key_attribute,
                                       .keys = options.keys,
                                       .ordering_keys = options.ordering_keys},
                                      random);
  }

  try {
    std::optional<sim::OidcSigner> signer;
    if (!options.oidc_audience.empty()) {
      signer.emplace(options.oidc_audience, options.oidc_email);
      if (!options.oidc_jwks_out.empty()) {
        std::ofstream jwks(options.oidc_jwks_out, std::ios::trunc);
        jwks << signer->jwks() << '\n';
        if (!jwks.flush()) {
          return fail(2, "--oidc-jwks-out: cannot write '" + options.oidc_jwks_out + "'");
        }
      }
    }
    std::optional<std::ofstream> dead_letter;
    if (!options.dead_letter.empty()) {
      dead_letter.emplace(options.dead_letter, std::ios::trunc);
      if (!*dead_letter) {
        return fail(2, "--dead-letter: cannot open '" + options.dead_letter + "' for writing");
      }
    }
    std::optional<sim::EventLog> events;
    try {
      events.emplace(options.events);
    } catch (const std::runtime_error& e) {
      return fail(2, e.what());
    }

    boost::asio::io_context io(1);
    std::optional<sim::Scheduler> scheduler;
    try {
      scheduler.emplace(io, options, std::move(messages), random, &*events,
                        dead_letter ? &*dead_letter : nullptr, signer ? &*signer : nullptr);
    } catch (const std::invalid_argument& e) {
      return fail(2, std::string("--endpoint/--subscription: ") + e.what());
    }
    scheduler->start();
    io.run();
    sim::Stats stats = scheduler->finish();
    stats.seed = seed;
    if (options.json) {
      std::cout << sim::summary_json(stats).dump() << std::endl;
    } else {
      std::cout << sim::summary_text(stats) << std::flush;
    }
    if (stats.unsettled > 0) {
      std::fprintf(stderr, "%s: %llu message(s) neither acked nor dead-lettered by --run-timeout\n",
                   kProgram, static_cast<unsigned long long>(stats.unsettled));
      return 1;
    }
    return 0;
  } catch (const std::runtime_error& e) {
    return fail(1, e.what());
  }
}
