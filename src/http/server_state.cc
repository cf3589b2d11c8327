#include "server_state.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <utility>

namespace idempotency::http::detail {

namespace {

std::shared_ptr<boost::asio::io_context> event_loop(const ServeOptions& options) {
  if (options.event_loop) return options.event_loop;
  return std::make_shared<boost::asio::io_context>(
      static_cast<int>(std::max<std::size_t>(options.io_threads, 1)));
}

}  // namespace

ServerState::ServerState(Handler h, AsyncHandler a, ServeOptions o)
    : handler(std::move(h)),
      async_handler(std::move(a)),
      options(std::move(o)),
      // An asynchronous handler never uses the workers: one idle thread, not `workers`.
      workers(async_handler ? 1 : std::max<std::size_t>(options.workers, 1)),
      io_owner(event_loop(options)),
      io(*io_owner) {}

ServerState::~ServerState() {
  io.stop();
  for (auto& thread : io_threads) {
    if (!thread.joinable()) continue;
    // The last reference may be dropped by a connection on an event-loop thread.
    if (thread.get_id() == std::this_thread::get_id()) {
      thread.detach();
    } else {
      thread.join();
    }
  }
  workers.join();
}

bool ServerState::on_connection_open(const std::shared_ptr<Connection>& connection) {
  std::lock_guard lock(mutex);
  ++open_connections;
  if (stopping.load()) return false;
  // Prune closed entries as new ones come, so the registry stays near the open count.
  if (connections.size() >= 2 * open_connections + 16) {
    std::erase_if(connections, [](const auto& weak) { return weak.expired(); });
  }
  connections.push_back(connection);
  return true;
}

void ServerState::on_connection_closed() {
  std::function<void()> resume;
  {
    std::lock_guard lock(mutex);
    --open_connections;
    if (accept_paused && !stopping.load() && open_connections < options.max_connections) {
      accept_paused = false;
      resume = resume_accept;
    }
    if (open_connections == 0) idle_cv.notify_all();
  }
  if (resume) boost::asio::post(io, std::move(resume));
}

bool ServerState::pause_if_full() {
  std::lock_guard lock(mutex);
  if (open_connections < std::max<std::size_t>(options.max_connections, 1)) return false;
  accept_paused = true;
  return true;
}

// A strand costs an allocation, a lock and a dispatch per handler; with one thread running the
// loop (options.event_loop must not be run elsewhere) nothing can overlap without it.
boost::asio::any_io_executor ServerState::connection_executor() {
  if (options.io_threads <= 1) return io.get_executor();
  return boost::asio::make_strand(io);
}

}  // namespace idempotency::http::detail
