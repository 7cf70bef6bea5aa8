// libFuzzer target: verl's per-rank FSDP model file (format/verl/
// verl_files.h), read as ReadVerlRank reads it. The input is the file's
// data.pkl, archived with the committed fixture's storages (fixtures/verl/
// fsdp2-w4, rank 2 of 4), so that the records' CRCs hold and mutations reach
// the DTensor parsing: global sizes, device meshes, coordinates, placements,
// strides, storage offsets. Any input reads or throws CheckpointError.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "format/dcp/torch_zip.h"
#include "format/verl/verl_files.h"

namespace {

constexpr int kWorld = 4, kRank = 2;

struct Fixture {
  std::vector<std::pair<std::string, std::string>> records;  // all but data.pkl, in order
  std::string dir;                                           // where the file is written
};

// Never destroyed: the exit handler below still needs its directory.
const Fixture& GetFixture() {
  static const Fixture& fixture = *[] {
    auto* fp = new Fixture;
    Fixture& f = *fp;
    const std::string name = distckpt::VerlModelFile(kWorld, kRank);
    std::ifstream in(std::string(DISTCKPT_VERL_FIXTURES) + "/fsdp2-w4/" + name, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), {}};
    distckpt::ZipReader zip(bytes, name);
    for (const distckpt::ZipReader::Entry& e : zip.entries()) {
      if (e.name != "data.pkl") f.records.emplace_back(e.name, zip.ReadRecord(e));
    }
    char dir[] = "/tmp/distckpt_verl_fuzz_XXXXXX";
    f.dir = mkdtemp(dir);
    atexit([] { std::filesystem::remove_all(GetFixture().dir); });
    return fp;
  }();
  return fixture;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Fixture& f = GetFixture();
  const std::string archive = distckpt::ZipToString([&](distckpt::ZipWriter& zip) {
    zip.AddRecord("data.pkl", std::string_view(reinterpret_cast<const char*>(data), size));
    for (const auto& [name, bytes] : f.records) zip.AddRecord(name, bytes);
  });
  std::ofstream(f.dir + "/" + distckpt::VerlModelFile(kWorld, kRank),
                std::ios::binary | std::ios::trunc)
      << archive;
  try {
    distckpt::ReadVerlRank(f.dir, kWorld, kRank);
  } catch (const distckpt::CheckpointError&) {
  }
  return 0;
}
