#include "manager/manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/thread_world.h"
#include "core/error_testing.h"
#include "engine/save.h"
#include "format/format.h"
#include "io/fault_env.h"
#include "io/memory_env.h"
#include "io/testing.h"

namespace distckpt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kWorld = 2;
constexpr int64_t kLocal = 4;

// Rank `rank`'s shard of key `key` at `iteration`: element i = iteration * 1000 + global i + salt.
Node Shard(const std::string& key, int rank, int64_t iteration, float salt) {
  Tensor t = Tensor::Empty(DType::kF32, {kLocal});
  for (int64_t i = 0; i < kLocal; ++i) {
    t.data_as<float>()[i] = static_cast<float>(iteration * 1000 + rank * kLocal + i) + salt;
  }
  return Node(ShardedTensor::FromRankOffsets(key, t, {{0, rank, kWorld}}));
}

Node Request(const std::string& key, int rank) {
  return Node(ShardedTensor::FromRankOffsets(key, Tensor::Zeros(DType::kF32, {kLocal}),
                                             {{0, rank, kWorld}}));
}

std::map<std::string, Node> ComponentState(const std::string& prefix, int rank, int64_t iteration) {
  return {{"model", Node(Dict{{"w", Shard(prefix + "w", rank, iteration, 0)}})},
          {"optimizer", Node(Dict{{"m", Shard(prefix + "m", rank, iteration, 0.5f)}})},
          {"extra", Node(Dict{{"lr", Node(nlohmann::json(iteration * 0.5))}})}};
}

IterationState StateOf(const std::vector<std::string>& components, int rank, int64_t iteration) {
  IterationState s;
  for (const std::string& c : components) s[c] = ComponentState(c, rank, iteration);
  return s;
}

// Checks the loaded model shard of `prefix`w against `iteration`.
void ExpectModel(const Node& loaded, const std::string& content, const std::string& name, int rank,
                 int64_t iteration, float salt) {
  const Tensor& t = loaded.at(content).at(name).as<Tensor>();
  for (int64_t i = 0; i < kLocal; ++i) {
    EXPECT_EQ(t.data_as<float>()[i],
              static_cast<float>(iteration * 1000 + rank * kLocal + i) + salt)
        << "rank " << rank << " element " << i;
  }
}

ManagerOptions Options(const std::string& root, CheckpointLayout layout, int keep = 0) {
  ManagerOptions o;
  o.root = root;
  o.layout = layout;
  o.retention.keep_last = keep;
  o.topology = "dp=2";
  return o;
}

TEST(Manager, MegatronLayoutTrackerAndKeepLast) {
  ScopedTempDir dir;
  RunRanks(kWorld, [&](Communicator& comm) {
    CheckpointManager m(Options(dir.path(), CheckpointLayout::kMegatron, 2), comm);
    for (int64_t it = 10; it <= 40; it += 10) m.Save(it, StateOf({""}, comm.rank(), it));
  });
  Env* env = Env::Default();
  EXPECT_EQ(ReadFileToString(env, TrackerPath(dir.path())), "40\n");
  Catalog c = ScanRoot(env, dir.path(), CheckpointLayout::kMegatron);
  EXPECT_THAT(c.CompleteIterations(), ElementsAre(30, 40));
  EXPECT_EQ(c.entries.size(), 2u);
  EXPECT_TRUE(env->FileExists(JoinPath(dir.path(), "iter_0000040/metadata.json")));
  RunRanks(kWorld, [&](Communicator& comm) {
    CheckpointManager m(Options(dir.path(), CheckpointLayout::kMegatron), comm);
    ResumePoint p = m.Resume("auto");
    ASSERT_TRUE(p.found);
    EXPECT_EQ(p.iteration, 40);
    Node req(Dict{{"model", Node(Dict{{"w", Request("w", comm.rank())}})},
                  {"extra", Node(Dict{{"lr", Node(nlohmann::json(nullptr))}})}});
    LoadResult r = m.Load(p, "", req, {"model", "extra"});
    ExpectModel(r.state_dict, "model", "w", comm.rank(), 40, 0);
    EXPECT_EQ(r.state_dict.at("extra").at("lr").as<nlohmann::json>(), 20.0);
    ResumePoint older = m.Resume("30");
    LoadResult r30 = m.Load(older, "", req, {"model"});
    ExpectModel(r30.state_dict, "model", "w", comm.rank(), 30, 0);
  });
}

TEST(Manager, VerlLayoutComponentsAndContents) {
  ScopedTempDir dir;
  RunRanks(kWorld, [&](Communicator& comm) {
    ManagerOptions o = Options(dir.path(), CheckpointLayout::kVerl, 2);
    o.components = {"actor", "critic"};
    o.save_contents = {"model", "extra"};  // no optimizer
    CheckpointManager m(o, comm);
    for (int64_t it = 1; it <= 3; ++it) m.Save(it, StateOf(o.components, comm.rank(), it));
    ResumePoint p = m.Resume("auto");
    EXPECT_EQ(p.iteration, 3);
    EXPECT_EQ(p.dir, JoinPath(dir.path(), "global_step_3"));
    Node req(Dict{{"model", Node(Dict{{"w", Request("criticw", comm.rank())}})},
                  {"optimizer", Node(Dict{{"m", Request("criticm", comm.rank())}})}});
    LoadResult r = m.Load(p, "critic", req, {"model"});
    ExpectModel(r.state_dict, "model", "w", comm.rank(), 3, 0);
    EXPECT_THAT([&] { m.Load(p, "critic", req, {"optimizer"}); },
                ThrowsError(ErrorKind::kKeyMismatch, "content 'optimizer' was not saved"));
    EXPECT_THAT([&] { m.Load(p, "ref", req, {"model"}); },
                ThrowsError(ErrorKind::kKeyMismatch, "no component 'ref'"));
  });
  Env* env = Env::Default();
  EXPECT_TRUE(env->FileExists(JoinPath(dir.path(), "global_step_3/actor/metadata.json")));
  EXPECT_TRUE(env->FileExists(JoinPath(dir.path(), "global_step_3/critic/metadata.json")));
  EXPECT_THAT(ScanRoot(env, dir.path(), CheckpointLayout::kVerl).CompleteIterations(),
              ElementsAre(2, 3));
  EXPECT_EQ(ReadFileToString(env, TrackerPath(dir.path())), "3\n");
}

TEST(Manager, AsyncCommitsTheTrackerInTheFinalize) {
  ScopedTempDir dir;
  RunRanks(kWorld, [&](Communicator& comm) {
    ManagerOptions o = Options(dir.path(), CheckpointLayout::kMegatron, 1);
    o.async = true;
    CheckpointManager m(o, comm);
    m.Save(5, StateOf({""}, comm.rank(), 5));
    comm.Barrier();
    // Before the finalize, nothing is committed: no tracker, no manifest.
    EXPECT_FALSE(Env::Default()->FileExists(TrackerPath(dir.path())));
    EXPECT_FALSE(Env::Default()->FileExists(JoinPath(m.IterationDir(5), kManifestFile)));
    comm.Barrier();
    EXPECT_THAT(m.Finalize(true), ElementsAre(5));
    m.Save(6, StateOf({""}, comm.rank(), 6));
    EXPECT_THAT(m.Finalize(true), ElementsAre(6));
    EXPECT_EQ(m.Resume("auto").iteration, 6);
  });
  EXPECT_THAT(
      ScanRoot(Env::Default(), dir.path(), CheckpointLayout::kMegatron).CompleteIterations(),
      ElementsAre(6));
}

TEST(Manager, FailedSaveLeavesTrackerAndLastGoodCheckpoint) {
  ScopedTempDir dir;
  FaultInjectionEnv env(Env::Default());
  RunRanks(kWorld, [&](Communicator& comm) {
    ManagerOptions o = Options(dir.path(), CheckpointLayout::kMegatron, 1);
    o.save.env = &env;
    CheckpointManager m(o, comm);
    m.Save(1, StateOf({""}, comm.rank(), 1));
    comm.Barrier();
    if (comm.rank() == 0) env.FailPathsContaining("iter_0000002/metadata");
    comm.Barrier();
    EXPECT_THROW(m.Save(2, StateOf({""}, comm.rank(), 2)), CheckpointError);
    comm.Barrier();
    if (comm.rank() == 0) env.FailPathsContaining("no-such-path");
    comm.Barrier();
    ResumePoint p = m.Resume("auto");
    EXPECT_EQ(p.iteration, 1);
    EXPECT_THAT(p.ignored, ElementsAre(HasSubstr("iter_0000002")));
    // The next save at 2 clears the failed attempt and commits; retention then removes 1.
    m.Save(2, StateOf({""}, comm.rank(), 2));
    EXPECT_EQ(m.Resume("auto").iteration, 2);
  });
  EXPECT_THAT(
      ScanRoot(Env::Default(), dir.path(), CheckpointLayout::kMegatron).CompleteIterations(),
      ElementsAre(2));
}

TEST(Manager, FailedTrackerWriteKeepsThePreviousCheckpoint) {
  ScopedTempDir dir;
  FaultInjectionEnv env(Env::Default());
  RunRanks(kWorld, [&](Communicator& comm) {
    ManagerOptions o = Options(dir.path(), CheckpointLayout::kMegatron, 1);
    o.save.env = &env;
    CheckpointManager m(o, comm);
    m.Save(1, StateOf({""}, comm.rank(), 1));
    comm.Barrier();
    if (comm.rank() == 0) env.FailPathsContaining("latest_checkpointed_iteration.txt.tmp");
    comm.Barrier();
    EXPECT_THAT([&] { m.Save(2, StateOf({""}, comm.rank(), 2)); },
                ThrowsError(ErrorKind::kIo, "latest_checkpointed_iteration.txt.tmp"));
  });
  Catalog c = ScanRoot(Env::Default(), dir.path(), CheckpointLayout::kMegatron);
  EXPECT_EQ(c.tracker, (Tracker{1, false}));
  // 1 (the tracker's) is still complete; 2 lost its manifest again.
  EXPECT_THAT(c.CompleteIterations(), ElementsAre(1));
  EXPECT_EQ(c.entries.size(), 2u);
}

TEST(Manager, ResumeRefusesIncompleteAndAgreesOnMax) {
  ScopedTempDir dir;
  Env* env = Env::Default();
  RunRanks(kWorld, [&](Communicator& comm) {
    CheckpointManager m(Options(dir.path(), CheckpointLayout::kMegatron), comm);
    ResumePoint none = m.Resume("auto");
    EXPECT_FALSE(none.found);
    m.Save(3, StateOf({""}, comm.rank(), 3));
  });
  // A tracker naming a directory that is not complete (written by hand).
  WriteTracker(env, dir.path(), {7, false});
  env->CreateDirs(JoinPath(dir.path(), "iter_0000007"));
  RunRanks(kWorld, [&](Communicator& comm) {
    CheckpointManager m(Options(dir.path(), CheckpointLayout::kMegatron), comm);
    EXPECT_THAT([&] { m.Resume("auto"); }, ThrowsError(ErrorKind::kIncomplete, "iter_0000007"));
    EXPECT_THAT([&] { m.Resume("7"); }, ThrowsError(ErrorKind::kIncomplete));
    EXPECT_EQ(m.Resume(JoinPath(dir.path(), "iter_0000003")).iteration, 3);
    // Ranks asking for different iterations agree on the maximum.
    ResumePoint p = m.Resume(comm.rank() == 0 ? "1" : "3");
    EXPECT_EQ(p.iteration, 3);
    EXPECT_EQ(p.warnings.size(), comm.rank() == 0 ? 1u : 0u);
  });
  // Garbage in the tracker is a corruption error naming it.
  WriteFileAtomic(env, TrackerPath(dir.path()), std::string("x\n"));
  RunRanks(kWorld, [&](Communicator& comm) {
    CheckpointManager m(Options(dir.path(), CheckpointLayout::kMegatron), comm);
    EXPECT_THAT([&] { m.Resume("auto"); },
                ThrowsError(ErrorKind::kCorruption, "latest_checkpointed_iteration.txt"));
  });
}

TEST(Manager, RetentionIsRebuiltFromDiskAndCleansOlderIncomplete) {
  ScopedTempDir dir;
  RunRanks(kWorld, [&](Communicator& comm) {
    CheckpointManager m(Options(dir.path(), CheckpointLayout::kVerl), comm);  // keep all
    for (int64_t it = 1; it <= 4; ++it) m.Save(it, StateOf({"actor"}, comm.rank(), it));
  });
  Env* env = Env::Default();
  env->RemoveFile(JoinPath(dir.path(), "global_step_2/distckpt_iteration.json"));  // incomplete
  RunRanks(kWorld, [&](Communicator& comm) {
    // A new run with keep_last 2 sees the earlier run's checkpoints.
    CheckpointManager m(Options(dir.path(), CheckpointLayout::kVerl, 2), comm);
    EXPECT_THAT([&] { m.Save(4, StateOf({"actor"}, comm.rank(), 4)); },
                ThrowsError(ErrorKind::kInvalidArgument, "refusing to overwrite"));
    m.Save(5, StateOf({"actor"}, comm.rank(), 5));
  });
  Catalog c = ScanRoot(env, dir.path(), CheckpointLayout::kVerl);
  EXPECT_THAT(c.CompleteIterations(), ElementsAre(4, 5));
  EXPECT_EQ(c.entries.size(), 2u);
}

// A root Megatron's own training loop wrote: iter_N directories that are
// committed torch_dist checkpoints without distckpt's manifest, a tracker.
TEST(Manager, AdoptsAndNeverDestroysIterationsAnotherToolWrote) {
  ScopedTempDir dir;
  Env* env = Env::Default();
  const std::string foreign5 = JoinPath(dir.path(), "iter_0000005");
  RunRanks(kWorld, [&](Communicator& comm) {
    SaveOptions save;
    save.format = &FormatByName("dcp");  // metadata.json (Megatron's config) + .metadata
    Dict tree;
    for (auto& [content, node] : ComponentState("", comm.rank(), 5)) tree[content] = node;
    Save(Node(std::move(tree)), foreign5, comm, save);
  });
  WriteTracker(env, dir.path(), {5, false});
  env->CreateDirs(JoinPath(dir.path(), "iter_0000007"));  // someone else's, unfinished
  WriteFileAtomic(env, JoinPath(dir.path(), "iter_0000007/notes.txt"), std::string("mine"));

  Catalog c = ScanRoot(env, dir.path(), CheckpointLayout::kMegatron);
  ASSERT_EQ(c.entries.size(), 2u);
  EXPECT_TRUE(c.entries[0].complete) << c.entries[0].why_incomplete;
  EXPECT_TRUE(c.entries[0].foreign);
  EXPECT_EQ(c.entries[0].format, "dcp");
  EXPECT_FALSE(c.entries[1].complete);
  EXPECT_TRUE(c.entries[1].foreign);
  EXPECT_THAT(c.entries[1].why_incomplete, HasSubstr("not written by distckpt"));

  RunRanks(kWorld, [&](Communicator& comm) {
    CheckpointManager m(Options(dir.path(), CheckpointLayout::kMegatron, 1), comm);
    ResumePoint p = m.Resume("auto");
    ASSERT_TRUE(p.found);
    EXPECT_EQ(p.iteration, 5);
    EXPECT_TRUE(p.foreign);
    EXPECT_EQ(m.Resume(foreign5).iteration, 5);
    Node request(Dict{{"model", Node(Dict{{"w", Request("w", comm.rank())}})}});
    LoadResult loaded = m.Load(p, "", request, {"model"});
    ExpectModel(loaded.state_dict, "model", "w", comm.rank(), 5, 0);
    // Never into the unfinished directory someone else left, nor behind the tracker.
    EXPECT_THAT([&] { m.Save(7, StateOf({""}, comm.rank(), 7)); },
                ThrowsError(ErrorKind::kInvalidArgument, "distckpt did not write"));
    EXPECT_THAT([&] { m.Save(3, StateOf({""}, comm.rank(), 3)); },
                ThrowsError(ErrorKind::kInvalidArgument, "refusing to move it back"));
    // keep_last 1: our own superseded iterations go, the foreign one stays.
    m.Save(10, StateOf({""}, comm.rank(), 10));
    m.Save(20, StateOf({""}, comm.rank(), 20));
  });
  c = ScanRoot(env, dir.path(), CheckpointLayout::kMegatron);
  std::vector<int64_t> left;
  for (const CatalogEntry& e : c.entries) left.push_back(e.iteration);
  EXPECT_THAT(left, ElementsAre(5, 7, 20));
  EXPECT_EQ(ReadFileToString(env, JoinPath(dir.path(), "iter_0000007/notes.txt")), "mine");
  // Retention took the deleted iteration's save lock with it.
  EXPECT_FALSE(env->FileExists(JoinPath(dir.path(), "iter_0000010.lock")));
  EXPECT_FALSE(env->FileExists(JoinPath(dir.path(), "iter_0000010")));
}

// Issue 38: one writer per root. A second manager on the root is refused on
// every rank, naming the holder; the lock goes with the first manager.
TEST(Manager, SecondWriterOnARootIsRefusedNamingTheHolder) {
  ScopedTempDir dir;
  RunRanks(kWorld, [&](Communicator& comm) {
    CheckpointManager first(Options(dir.path(), CheckpointLayout::kMegatron), comm);
    first.Save(2, StateOf({""}, comm.rank(), 2));
    EXPECT_THAT(
        [&] { CheckpointManager second(Options(dir.path(), CheckpointLayout::kMegatron), comm); },
        ThrowsError(ErrorKind::kInvalidArgument, "checkpoint root " + dir.path() +
                                                     " is held by another writer (pid " +
                                                     std::to_string(::getpid()) + " on host "));
    ManagerOptions unlocked = Options(dir.path(), CheckpointLayout::kMegatron);
    unlocked.lock_root = false;  // readers that opt out are not refused
    CheckpointManager reader(unlocked, comm);
    EXPECT_EQ(reader.Resume("auto").iteration, 2);
  });
  EXPECT_TRUE(Env::Default()->FileExists(JoinPath(dir.path(), kWriterLockFile)));
  EXPECT_EQ(FileLock::HeldBy(JoinPath(dir.path(), kWriterLockFile)), std::nullopt);
  RunRanks(kWorld, [&](Communicator& comm) {  // released: a later run writes
    CheckpointManager again(Options(dir.path(), CheckpointLayout::kMegatron), comm);
    again.Save(4, StateOf({""}, comm.rank(), 4));
  });
  EXPECT_EQ(ReadFileToString(Env::Default(), TrackerPath(dir.path())), "4\n");
}

// Non-persistent roots: only the committed iteration is kept, and the
// tracker may move back (a run resumed from an older persistent checkpoint).
TEST(Manager, TransientRootKeepsOnlyTheNewestAndMayMoveBack) {
  for (bool async : {false, true}) {
    ScopedTempDir dir;
    RunRanks(kWorld, [&](Communicator& comm) {
      ManagerOptions o = Options(dir.path(), CheckpointLayout::kMegatron, 5);
      o.transient = true;
      o.async = async;
      CheckpointManager m(o, comm);
      for (int64_t it : {3, 6, 9}) {
        m.Save(it, StateOf({""}, comm.rank(), it));
        m.Finalize(true);
      }
      EXPECT_THAT(m.Scan().CompleteIterations(), ElementsAre(9)) << "async " << async;
      m.Save(6, StateOf({""}, comm.rank(), 6));  // back: 9 is the abandoned timeline's
      m.Finalize(true);
      EXPECT_THAT(m.Scan().CompleteIterations(), ElementsAre(6));
      m.Save(9, StateOf({""}, comm.rank(), 9));
      m.Finalize(true);
      m.Save(9, StateOf({""}, comm.rank(), 9));  // the tracker's own iteration: replaced
      m.Finalize(true);
      ResumePoint p = m.Resume("auto");
      EXPECT_EQ(p.iteration, 9);
      Node req(Dict{{"model", Node(Dict{{"w", Request("w", comm.rank())}})}});
      ExpectModel(m.Load(p, "", req, {"model"}).state_dict, "model", "w", comm.rank(), 9, 0);
    });
    EXPECT_THAT(
        ScanRoot(Env::Default(), dir.path(), CheckpointLayout::kMegatron).CompleteIterations(),
        ElementsAre(9));
  }
}

// The manager on a MemoryEnv (the storage seam): saves sync and async,
// retention, the root's writer lock and resume all go through the Env; the
// root never appears on the real file system.
TEST(Manager, RunsEntirelyOnAMemoryEnv) {
  MemoryEnv mem;
  const std::string root = "/distckpt-memory-manager-" + std::to_string(::getpid());
  for (bool async : {false, true}) {
    RunRanks(kWorld, [&](Communicator& comm) {
      ManagerOptions o = Options(root, CheckpointLayout::kVerl, 2);
      o.save.env = &mem;
      o.async = async;
      CheckpointManager m(o, comm);
      if (async) {
        EXPECT_EQ(m.Resume("auto").iteration, 30);
      }
      for (int64_t it = async ? 40 : 10; it <= (async ? 60 : 30); it += 10) {
        m.Save(it, StateOf({"actor"}, comm.rank(), it));
        m.Finalize(false);
      }
      m.Finalize(true);
      EXPECT_THAT([&] { CheckpointManager second(o, comm); },
                  ThrowsError(ErrorKind::kInvalidArgument, "is held by another writer"));
      ResumePoint p = m.Resume("auto");
      Node req(Dict{{"model", Node(Dict{{"w", Request("actorw", comm.rank())}})}});
      ExpectModel(m.Load(p, "actor", req, {"model"}).state_dict, "model", "w", comm.rank(),
                  p.iteration, 0);
    });
  }
  EXPECT_THAT(ScanRoot(&mem, root, CheckpointLayout::kVerl).CompleteIterations(),
              ElementsAre(50, 60));
  EXPECT_EQ(ReadFileToString(&mem, TrackerPath(root)), "60\n");
  EXPECT_TRUE(mem.FileExists(JoinPath(root, kWriterLockFile)));
  EXPECT_FALSE(Env::Default()->FileExists(root)) << "bytes went around the Env";
}

}  // namespace
}  // namespace distckpt
