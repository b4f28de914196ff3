// A stand-in for libFuzzer's driver in builds without it (g++): runs every seed input, then a fixed
// number of deterministic pseudo-random mutations of them, through LLVMFuzzerTestOneInput. A crash
// or failed FUZZ_CHECK aborts, and the input is written to fuzz-failure.bin in the working
// directory first so it can be replayed alone.
//
// Usage: fuzz_replay_<target> [--mutations=N] [--seed=S] CORPUS_DIR_OR_FILE...
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

constexpr size_t kMaxInputBytes = 1 << 20;

// splitmix64: small, fast and the same on every platform.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound); bound > 0.
  size_t Below(size_t bound) { return static_cast<size_t>(Next() % bound); }

 private:
  uint64_t state_;
};

const std::string* g_current = nullptr;

void SaveCurrentInput() {
  if (g_current == nullptr) return;
  std::ofstream out("fuzz-failure.bin", std::ios::binary);
  out.write(g_current->data(), static_cast<std::streamsize>(g_current->size()));
}

void OnAbort(int signal) {
  SaveCurrentInput();
  std::fprintf(stderr, "fuzz replay: signal %d; input (%zu bytes) saved to fuzz-failure.bin\n",
               signal, g_current == nullptr ? size_t{0} : g_current->size());
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void Run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  g_current = nullptr;
}

void Mutate(std::string& data, const std::vector<std::string>& seeds, Random& random) {
  static constexpr uint64_t kInteresting[] = {0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff,
                                              0x7fffffff, 0xffffffff, 0x7fffffffffffffffull,
                                              ~0ull, 16, 64, 4096};
  const size_t steps = 1 + random.Below(4);
  for (size_t step = 0; step < steps; ++step) {
    switch (random.Below(9)) {
      case 0:  // flip a bit
        if (!data.empty()) data[random.Below(data.size())] ^= static_cast<char>(1u << random.Below(8));
        break;
      case 1:  // random byte
        if (!data.empty()) data[random.Below(data.size())] = static_cast<char>(random.Next());
        break;
      case 2: {  // insert random bytes
        const size_t count = 1 + random.Below(8);
        std::string bytes;
        for (size_t i = 0; i < count; ++i) bytes.push_back(static_cast<char>(random.Next()));
        data.insert(random.Below(data.size() + 1), bytes);
        break;
      }
      case 3:  // erase a range
        if (!data.empty()) {
          const size_t at = random.Below(data.size());
          data.erase(at, 1 + random.Below(std::min<size_t>(16, data.size() - at)));
        }
        break;
      case 4:  // duplicate a range elsewhere
        if (!data.empty()) {
          const size_t at = random.Below(data.size());
          const std::string chunk = data.substr(at, 1 + random.Below(32));
          data.insert(random.Below(data.size() + 1), chunk);
        }
        break;
      case 5:  // truncate
        data.resize(random.Below(data.size() + 1));
        break;
      case 6: {  // splice with another seed
        const std::string& other = seeds[random.Below(seeds.size())];
        data = data.substr(0, random.Below(data.size() + 1)) +
               other.substr(random.Below(other.size() + 1));
        break;
      }
      case 7: {  // overwrite with an interesting little-endian integer (lengths, counts)
        const uint64_t value = kInteresting[random.Below(std::size(kInteresting))];
        const size_t width = size_t{1} << random.Below(4);  // 1, 2, 4 or 8 bytes
        if (data.size() >= width) {
          const size_t at = random.Below(data.size() - width + 1);
          for (size_t i = 0; i < width; ++i) data[at + i] = static_cast<char>(value >> (8 * i));
        }
        break;
      }
      default:  // interesting byte
        if (!data.empty()) {
          data[random.Below(data.size())] =
              static_cast<char>(kInteresting[random.Below(5)]);
        }
        break;
    }
  }
  if (data.size() > kMaxInputBytes) data.resize(kMaxInputBytes);
}

bool ReadInput(const std::filesystem::path& path, std::vector<std::string>& inputs) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  inputs.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mutations = 2000;
  uint64_t seed = 1;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--mutations=", 0) == 0) {
      mutations = std::stoul(arg.substr(12));
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::stoull(arg.substr(7));
    } else if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& file : files) ReadInput(file, inputs);
    } else if (!ReadInput(arg, inputs)) {
      std::fprintf(stderr, "fuzz replay: cannot read '%s'\n", arg.c_str());
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr,
                 "usage: %s [--mutations=N] [--seed=S] CORPUS_DIR_OR_FILE...\n"
                 "(no inputs found)\n",
                 argv[0]);
    return 2;
  }
  std::signal(SIGABRT, OnAbort);
  std::signal(SIGSEGV, OnAbort);
  std::signal(SIGBUS, OnAbort);
  std::signal(SIGFPE, OnAbort);
  for (const std::string& input : inputs) Run(input);
  Random random(seed);
  for (size_t i = 0; i < mutations; ++i) {
    std::string input = inputs[random.Below(inputs.size())];
    Mutate(input, inputs, random);
    Run(input);
  }
  std::printf("fuzz replay: %zu seed inputs and %zu mutations ran cleanly\n", inputs.size(),
              mutations);
  return 0;
}
