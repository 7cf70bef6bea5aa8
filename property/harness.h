// Runs a RapidCheck property as the current GoogleTest, with this suite's
// conventions:
//  - budget: `cases` test cases unless RC_PARAMS sets max_success (the slow
//    label and ad-hoc long runs use RC_PARAMS="max_success=N");
//  - seed: RC_PARAMS="seed=S" or a fresh one, mixed with the test's name so
//    that properties draw different cases; S is printed, and rerunning the
//    test with RC_PARAMS="seed=S" reproduces a failure;
//  - classes: the tags of every case (RC_TAG, Tag()) are counted and printed
//    one per line; each ClassMinimum must reach its fraction of the cases,
//    so a generator that stops producing an interesting class fails;
//  - counterexamples: a failing case calls FailCase() (or CheckScenario())
//    with the scenario that reproduces it; the last one recorded (after
//    RapidCheck's shrinking, the minimal one; with CheckScenario, shrunk
//    further by ShrinkScenario) is written to $DISTCKPT_PROPERTY_OUT (default
//    <tmp>/distckpt-property) and the `distckpt run` command is printed;
//    a case that ends in an exception instead is recorded with the scenario
//    SetCase named for it; and every failure (a case, a give-up, a class
//    below its minimum, an error in the harness itself) prints the seed and
//    writes <Suite>.<Test>-seed<S>.txt there with the whole report, so that a
//    failure seen only as "Failed" in a ctest summary can still be replayed;
//  - MPI: with `world` set, every rank runs the same cases (rank 0's seed);
//    the property must return the same verdict on every rank (RunReshardOn
//    does), so that RapidCheck shrinks identically everywhere; rank 0 writes.
//
// Thread-safety: one property at a time per process.
#ifndef DISTCKPT_PROPERTY_HARNESS_H_
#define DISTCKPT_PROPERTY_HARNESS_H_

#include <rapidcheck.h>

#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "harness/spec/spec.h"
#include "property/scenario_shrink.h"

namespace distckpt {

struct ClassMinimum {
  std::string tag;
  double fraction = 0;  // of the cases run
};

struct PropertyOptions {
  PropertyOptions(int cases, std::vector<ClassMinimum> minimums = {}, Communicator* world = nullptr,
                  std::string replay_flags = "")
      : cases(cases),
        minimums(std::move(minimums)),
        world(world),
        replay_flags(std::move(replay_flags)) {}
  int cases;
  std::vector<ClassMinimum> minimums;
  Communicator* world;       // MPI: the ranks running the property together
  std::string replay_flags;  // appended to the printed `distckpt run FILE` (e.g. "--format dcp")
};

// Runs `property` and reports through GoogleTest (ADD_FAILURE on failure).
void RunProperty(const rc::detail::Property& property, const PropertyOptions& options);

// Runs one case's body: turns an exception escaping it into a failure of the
// scenario SetCase named (else it fails as RapidCheck reports it, with no
// scenario), and forgets a scenario recorded by an earlier case when this one
// fails without FailCase.
void RunCase(const std::function<void()>& body);

// `testable` takes no arguments: cases draw their values with `*gen` inside.
template <typename Testable>
void CheckProperty(const PropertyOptions& options, Testable&& testable) {
  static_assert(std::is_invocable_v<Testable&>, "a property draws its values inside: no arguments");
  RunProperty(rc::detail::toProperty([&testable] { RunCase([&] { testable(); }); }), options);
}

// Adds tags to the current case (counted by RunProperty).
void Tag(const std::vector<std::string>& tags);

// Names the scenario (and `note`, as FailCase) that reproduces the current
// case, should it end in an exception rather than in FailCase.
void SetCase(const Scenario& scenario, const std::string& note = "");

// Records `scenario` (with `note` as its description: what the scenario file
// cannot express, e.g. the byte flipped) as the current counterexample and
// fails the case with `why`.
[[noreturn]] void FailCase(const Scenario& scenario, const std::string& why,
                           const std::string& note = "");

// Runs `check` on `scenario` and fails the case if it fails, recording the
// scenario, `check` and `limits`, so that the minimal case is shrunk further
// by ShrinkScenario before it is written. Under MPI `check` is collective.
void CheckScenario(const Scenario& scenario, const GenLimits& limits, const ScenarioCheck& check);

// Fails the case with `why` unless `failure` is empty.
inline void ExpectNoFailure(const std::optional<std::string>& failure, const Scenario& scenario,
                            const std::string& note = "") {
  if (failure) FailCase(scenario, *failure, note);
}

// Where counterexamples go ($DISTCKPT_PROPERTY_OUT or <tmp>/distckpt-property), created.
std::string CounterexampleDir();
// A fresh directory for checkpoints: under $DISTCKPT_PROPERTY_WORK, else
// /dev/shm when writable (fsync is free there), else <tmp>. Removed by the caller.
std::string MakeWorkDir();

}  // namespace distckpt

#endif  // DISTCKPT_PROPERTY_HARNESS_H_
