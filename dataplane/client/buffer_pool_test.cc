#include "dataplane/client/buffer_pool.h"

#include <catch2/catch.hpp>

namespace sluice::client {
namespace {

TEST_CASE("BufferPool: a dropped element's buffer is handed out again, within the bounds") {
  auto pool = BufferPool::Create(2, 1 << 20);
  CHECK(pool->Take().capacity() < 1000);  // empty pool: a fresh string
  std::string big(100000, 'x');
  const char* where = big.data();
  auto held = pool->Adopt(std::move(big));
  CHECK(held->size() == 100000);
  CHECK(pool->buffers() == 0);
  held.reset();  // the last reference: back to the pool, emptied
  CHECK(pool->buffers() == 1);
  std::string again = pool->Take();
  CHECK(again.empty());
  CHECK(again.capacity() >= 100000);
  CHECK(again.data() == where);
  CHECK(pool->buffers() == 0);

  // Bounded by count ...
  auto a = pool->Adopt(std::string(1000, 'a'));
  auto b = pool->Adopt(std::string(1000, 'b'));
  auto c = pool->Adopt(std::string(1000, 'c'));
  a.reset();
  b.reset();
  c.reset();
  CHECK(pool->buffers() == 2);
  // ... and by bytes.
  auto small_pool = BufferPool::Create(10, 150000);
  auto d = small_pool->Adopt(std::string(100000, 'd'));
  auto e = small_pool->Adopt(std::string(100000, 'e'));
  d.reset();
  e.reset();
  CHECK(small_pool->buffers() == 1);
  CHECK(small_pool->bytes() >= 100000);
  CHECK(small_pool->bytes() <= 150000);
}

TEST_CASE("BufferPool: elements may outlive their pool") {
  auto pool = BufferPool::Create(4, 1 << 20);
  auto held = pool->Adopt(std::string(5000, 'z'));
  pool.reset();
  CHECK((*held)[4999] == 'z');
  held.reset();  // must not touch the destroyed pool
}

}  // namespace
}  // namespace sluice::client
