"""One case at one release: its environment, the driver's run, and the judged row.

The side's job writes `<case>/<side>.jsonl` (the driver's records, as the release wrote them) and
`<case>/<side>.json` (the row of the record: the verdict, its statistic, the environment). A sampled
case's number of samples is planned before either side samples (`plan`): a pilot at the affected
release measures the bug's effect, and the plan is the N at which the test catches it with the case's
power; both sides then sample N, so "passed" at the fixed release is a test that would have caught the
bug, and a miss under a short plan says `underpowered`.

    orthrus zoo plan CONFIG CASE SUBJECT.json ENV.json PLAN.json
    orthrus zoo run CONFIG CASE SIDE SUBJECT.json ENV.json PLAN.json ROW.json
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from orthrus.zoo import judge
from orthrus.zoo.cases import ENGINES, Case, Zoo
from orthrus.zoo.envs import ROOT
from orthrus.zoo.subjects import prompt_ids

DRIVERS = Path(__file__).parent / "drivers"
PILOT_SEED = 1_000_003  # the pilot's samples are not the run's


def spec(case: Case, zoo: Zoo, subject: dict, side: str, samples: int, seed: int) -> dict:
    release = getattr(case, side)
    return {
        "model": subject["teacher"], "draft": subject.get("draft") if case.draft else None,
        "prompts": prompt_ids(case.prompts), "arms": case.arms, "max_new_tokens": case.max_new_tokens,
        "sampling": case.sampling.model_dump() if case.sampling else None, "samples": samples, "seed": seed,
        "threads": zoo.threads, "logits": case.sampling is None,
        "patch": {"file": str(ROOT / release.patch.file), "apply": release.patch.apply} if release.patch else None,
    }  # fmt: skip


def _stop(signum, frame):
    raise SystemExit(128 + signum)


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def drive(case: Case, python: str, job: dict, out: Path, log_path: Path) -> str | None:
    """Run the case's driver under the release's Python; None, or why it failed (one line). A run past
    the case's time limit is killed with its whole process group: nothing of it outlives the job."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    env = os.environ | {"OMP_NUM_THREADS": str(job["threads"]), "TOKENIZERS_PARALLELISM": "false"}
    cmd = [python, str(DRIVERS / ENGINES[case.engine]), f.name, str(out)]
    with open(log_path, "a") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
        # the driver runs in a session of its own (so that one kill reaches every process it spawned, vLLM's
        # engine core too): a job stopped by SIGTERM takes it down on the way out
        previous = signal.signal(signal.SIGTERM, _stop)
        try:
            _, err = proc.communicate(timeout=case.timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            return f"the driver ran past the case's timeout_s ({case.timeout_s} s)"
        except BaseException:
            _kill(proc)
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
            os.unlink(f.name)
        log.write(err)
    if proc.returncode != 0:
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        return lines[-1] if lines else f"the driver exited {proc.returncode}"
    return None


def plan(case: Case, zoo: Zoo, subject: dict, env: dict, work: Path) -> dict:
    """The samples per prompt both sides draw (sampled cases; a greedy case draws one)."""
    if case.sampling is None:
        return {"samples": 1, "source": "greedy"}
    if case.samples is not None:
        return {"samples": case.samples, "source": "the case's samples"}
    if not env.get("ok"):
        return {
            "samples": case.max_samples,
            "source": "the plan's ceiling: no pilot (the affected release did not install)",
        }
    out = work / "pilot.jsonl"
    failed = drive(
        case, env["python"], spec(case, zoo, subject, "affected", case.pilot, PILOT_SEED), out, work / "pilot.log"
    )
    if failed:
        return {"samples": case.max_samples, "source": f"the plan's ceiling: the pilot failed ({failed})"}
    test = judge.sampled(case, subject, judge.read(out)[1])["speculative"]
    return judge.power_plan(test, case.pilot, case.power, case.alpha, case.max_samples)


def side(case: Case, zoo: Zoo, side_name: str, subject: dict, env: dict, planned: dict, work: Path) -> dict:
    """The row of one case at one release."""
    release = getattr(case, side_name)
    patch = release.patch and f"{Path(release.patch.file).name} ({', '.join(release.patch.apply)})"
    row = {"side": side_name, "version": release.version or "prebuilt", "patch": patch,
           "environment_name": env.get("name"), "samples": planned["samples"], "plan": planned.get("source")}  # fmt: skip
    if not env.get("ok"):
        return row | {"verdict": "not installed", "reason": env.get("reason")}
    out = work / f"{side_name}.jsonl"
    failed = drive(
        case,
        env["python"],
        spec(case, zoo, subject, side_name, planned["samples"], zoo.seed),
        out,
        work / f"{side_name}.log",
    )
    if failed:
        return row | {"verdict": "failed", "reason": failed}
    environment, records = judge.read(out)
    if release.version is None:  # a prebuilt environment: the release is what its driver found
        row["version"] = environment.get("version", "prebuilt")
    row["environment"] = environment | {"freeze": env.get("freeze"), "build_env": env.get("build_env")}
    return row | judge.verdict(case, subject, records, environment, planned)
