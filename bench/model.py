"""``python -m bench model``: what the shared, batched model service gives on this machine.

1. **Throughput**: the members' own requests (a decomposer's grammar-bound split of
   eight goals, twice each with different seeds: sixteen, with the prompt and JSON
   schema ``prompted.py`` sends) through one ``swarm model-service``: one after
   another (the baseline, measured in the same run), then with 1, 4 and 8 clients
   each sending its next request as soon as its last is answered (so the service
   keeps that many in flight until the last ones drain). Beside them the same
   engine's grammar-free figures, one after another and with 8 clients: the ceiling
   the grammar checks leave room for, and the engine's own gain from batching on
   this machine (the most any grammar handling could give). And llama.cpp's own
   ``llama-batched-bench`` (``make batched-bench`` builds it, one target of the
   llama.cpp the wheel vendors, a few minutes) on the same model, threads and request
   shape (the service's prompt tokens, the mean generated), 1, 4 and 8 sequences: the
   ceiling of llama.cpp's batching here, grammar-free, every prompt read before any
   generation. It runs once the service has stopped.
2. **The swarm** (about seven minutes; ``BENCH_MODEL_PLAN=0`` skips it): ``swarm plan`` wall
   time and the whole swarm's memory (the sum of every process's PSS, so the model
   file mapped by many processes counts once), with the shared service against one
   model per member, and the shared service with each member making one call at a
   time (``--llm-parallel 1``) against the default (executors and decomposers two).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from agents.cli.plan import start_model_service, swarm_command
from agents.llm import SHARED_PARALLEL
from agents.llm.model_files import resolve
from agents.llm.prompted import SPLIT_SCHEMA, SYSTEM

GOALS = ("Plan a two-week trip to Japan", "Ship version 2.0 of an open-source library",
         "Organise a wedding for 80 guests", "Write a research survey on conflict-free replicated data types",
         "Move a family of four to another city", "Open a neighbourhood bakery", "Learn Spanish in a year",
         "Train for a first marathon")
MAX_TOKENS = 400  # the decomposer's budget
REQUESTS = 16


def split_request(goal: str, seed: int, grammar: bool = True) -> dict:
    prompt = (f"Overall goal: {goal}\nTask to split: {goal}\n\nSplit the task into 3 to 5 subgoals. "
              "Each subgoal needs a short specific title that names something concrete, a one-sentence "
              "description, and \"executable\": true if one person can do it in one sitting.")
    body = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
            "max_tokens": MAX_TOKENS, "temperature": 0.2, "seed": seed}
    if grammar:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "split", "schema": SPLIT_SCHEMA}}
    return body


def post(url: str, body: dict) -> dict:
    answer = httpx.post(f"{url}/chat/completions", json=body, timeout=600)
    answer.raise_for_status()
    return answer.json()


def run_batch(url: str, bodies: list[dict], concurrent: int) -> tuple[float, int, int]:
    """(seconds, completion tokens, valid JSON answers) for ``bodies``, ``concurrent`` at a time."""
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrent) as pool:
        answers = list(pool.map(lambda b: post(url, b), bodies))
    seconds = time.perf_counter() - started
    tokens = sum(a["usage"]["completion_tokens"] for a in answers)
    valid = 0
    for answer in answers:
        try:
            json.loads(answer["choices"][0]["message"]["content"])
            valid += 1
        except ValueError:
            pass
    return seconds, tokens, valid


def _health(port: int) -> dict:
    return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json()


def _engine_share(port: int, before: dict) -> str:
    """Where the service's stepping time went since ``before`` (its ``/health``): the share
    inside ``llama_decode``, and the decode loop's own time per token (sampling, grammar
    checks and bookkeeping; of that, the grammar applied to the whole vocabulary after a
    refused draw). Not counted: admitting a request (its template, tokens and grammar) and
    the HTTP around it."""
    after = _health(port)
    busy, decode, fallback, tokens = (after[k] - before[k] for k in ("busy_s", "decode_s", "fallback_s", "tokens"))
    tokens = max(tokens, 1)
    return (f"{decode / max(busy, 1e-9):.0%} | {(busy - decode) * 1000 / tokens:.2f} "
            f"({fallback * 1000 / tokens:.2f})")


def throughput() -> None:
    service = start_model_service(Path(os.devnull), None, threads=os.cpu_count() or 2, timeout=600)
    url = service.url
    print(f"model service at {url}", flush=True)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    try:
        prompt_tokens = post(url, split_request(GOALS[0], 99))["usage"]["prompt_tokens"]  # warm: page cache, first graph
        print(f"\n## model service throughput ({REQUESTS} of the decomposer's grammar-bound requests)")
        print("In llama_decode: the share of the service's stepping time spent in the engine. Loop's own: "
              "the rest, per token (sampling, grammar checks, bookkeeping); in brackets, the grammar applied "
              "to the whole vocabulary after it refused a draw. Admitting requests and HTTP are in neither.")
        print("| clients (requests in flight) | seconds | tokens | tokens/s | x one after another | valid JSON "
              "| in llama_decode | loop's own (ms/token) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        bodies = [split_request(GOALS[i % len(GOALS)], i) for i in range(REQUESTS)]
        before = _health(port)
        base_s, base_tokens, base_valid = run_batch(url, bodies, 1)
        base_rate = base_tokens / base_s
        served = {1: base_rate}  # grammar-bound tokens/s by requests in flight
        print(f"| one after another (baseline) | {base_s:.1f} | {base_tokens} | {base_rate:.1f} | 1.00 "
              f"| {base_valid}/{REQUESTS} | {_engine_share(port, before)} |", flush=True)
        for concurrent in (4, 8):
            before = _health(port)
            seconds, tokens, valid = run_batch(url, bodies, concurrent)
            served[concurrent] = tokens / seconds
            print(f"| {concurrent} | {seconds:.1f} | {tokens} | {tokens / seconds:.1f} | "
                  f"{tokens / seconds / base_rate:.2f} | {valid}/{REQUESTS} | {_engine_share(port, before)} |",
                  flush=True)
        # the engine's own gain from batching, grammar aside: the same requests free of it, one
        # after another and then eight at once (the second row's ratio is to the first of the two)
        free = [split_request(GOALS[i % len(GOALS)], i, grammar=False) for i in range(REQUESTS)]
        before = _health(port)
        seconds, tokens, _ = run_batch(url, free, 1)
        free_rate = tokens / seconds
        print(f"| one after another, no grammar | {seconds:.1f} | {tokens} | {free_rate:.1f} | "
              f"{free_rate / base_rate:.2f} | - | {_engine_share(port, before)} |", flush=True)
        before = _health(port)
        seconds, tokens, _ = run_batch(url, free, 8)
        print(f"| 8, no grammar (the service's own ceiling; llama.cpp's below) | {seconds:.1f} | {tokens} | {tokens / seconds:.1f} | "
              f"{tokens / seconds / base_rate:.2f} ({tokens / seconds / free_rate:.2f} of no grammar one "
              f"after another) | - | {_engine_share(port, before)} |", flush=True)
        stats = _health(port)
        print(f"\nservice: {stats['steps']} decode steps, {stats['tokens']} tokens, "
              f"{stats['grammar_fallbacks']} grammar fallbacks, peak batch {stats['peak_batch']}")
    finally:
        service.stop()
    # after the service has stopped: its threads and KV cache leave the cores and memory to it
    _llama_batched_bench(prompt_tokens, round(base_tokens / REQUESTS), served)


SEQUENCES = (1, 4, 8)  # llama-batched-bench's parallel sequences: the service's rows


def _llama_batched_bench(prompt_tokens: int, generated: int, served: dict[int, float]) -> None:
    """llama.cpp's own ``llama-batched-bench`` on the service's model, threads and request
    shape, printed beside the service's grammar-bound rates: generated tokens per second of
    the whole run (prompts included, as a member's request includes its prompt), and of the
    generation alone. Its binary comes from ``make batched-bench`` (``LLAMA_BATCHED_BENCH``)."""
    binary = os.environ.get("LLAMA_BATCHED_BENCH", "")
    if not binary or not Path(binary).is_file():
        print("\n(llama.cpp's llama-batched-bench is not built: `make batched-bench`, or `make bench`, which "
              "builds it and passes its path in LLAMA_BATCHED_BENCH)")
        return
    if generated < 1:
        print("\n(llama-batched-bench not run: the service generated no tokens)")
        return
    threads = os.cpu_count() or 2
    context = (prompt_tokens + generated) * max(SEQUENCES) + 256
    command = [binary, "-m", str(resolve(None).path), "-c", str(context), "-b", "2048", "-ub", "512",
               "-npp", str(prompt_tokens), "-ntg", str(generated), "-npl", ",".join(map(str, SEQUENCES)),
               "-t", str(threads), "-kvu"]  # one KV cache for all sequences, as the service keeps
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except (subprocess.TimeoutExpired, OSError) as exc:
        print(f"\nllama-batched-bench failed ({binary}): {exc}; rebuild it with `make batched-bench` after "
              "removing the file")
        return
    rows: dict[int, tuple[float, int, float]] = {}  # sequences -> (seconds, generated tokens, generation tokens/s)
    for line in done.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[2].isdigit():  # | PP | TG | B | N_KV | T_PP | S_PP | T_TG | S_TG | T | S |
            sequences, tg = int(cells[2]), int(cells[1])
            rows[sequences] = (float(cells[8]), sequences * tg, float(cells[7]))
    if set(rows) != set(SEQUENCES):
        missing = ", ".join(str(n) for n in SEQUENCES if n not in rows)
        print(f"\nllama-batched-bench gave no row for {missing} sequence(s) at once (exit {done.returncode}): "
              f"{done.stderr.strip()[-300:]}")
        return
    print(f"\n## llama.cpp's own batching (`llama-batched-bench`, the same model, {threads} threads, no grammar, "
          f"{prompt_tokens} prompt and {generated} generated tokens a sequence: the service's prompt and mean "
          "answer; all prompts read before any generation)")
    print("| sequences at once | seconds | generated tokens | generated tokens/s | x one sequence "
          "| generation alone (tokens/s) | the service, as many requests in flight, share of this |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    one = rows[1][1] / rows[1][0]
    for sequences in SEQUENCES:
        seconds, tokens, generation = rows[sequences]
        rate = tokens / seconds
        share = f"{served[sequences] / rate:.2f}" if sequences in served else "-"
        print(f"| {sequences} | {seconds:.1f} | {tokens} | {rate:.1f} | {rate / one:.2f} | {generation:.1f} "
              f"| {share} |", flush=True)


def _children(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, ()))
    return found


def _pss_mb(pids: list[int]) -> float:
    total_kb = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total_kb += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total_kb / 1024


def plan_run(shared: bool, parallel: int | None = None) -> tuple[float, float, str, dict]:
    """(wall seconds, peak PSS of the whole swarm in MB, outcome, model usage) of one ``swarm plan``
    (``parallel``: its ``--llm-parallel``, else the plan's default)."""
    with tempfile.TemporaryDirectory() as out:
        command = [*swarm_command(), "plan", GOALS[0], "--out", out, "--timeout", "600"]
        if not shared:
            command.append("--model-per-member")
        if parallel is not None:
            command += ["--llm-parallel", str(parallel)]
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        peak = [0.0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(2.0):
                peak[0] = max(peak[0], _pss_mb(_children(process.pid)))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        process.wait()
        wall = time.perf_counter() - started
        done.set()
        sampler.join()
        outcome = "complete" if process.returncode == 0 else f"exit {process.returncode}"
        plan_file = Path(out) / "plan.json"
        usage = json.loads(plan_file.read_text()).get("model_usage", {}) if plan_file.exists() else {}
        return wall, peak[0], outcome, usage


def swarm_plans() -> None:
    print("\n## swarm plan with the shared service against one model per member (9 members, 2 cores)")
    print("| model | wall (s) | model calls | calls dropped unfinished | tokens | tokens/s (whole swarm) "
          "| peak memory, PSS of all processes (MB) | outcome |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    rows = {}
    for name, shared, parallel in (("one per member", False, None),
                                   ("one shared service, one call at a time per member", True, 1),
                                   (f"one shared service, {SHARED_PARALLEL} calls at a time (the default)", True, None)):
        wall, pss, outcome, usage = plan_run(shared, parallel)
        tokens = int(usage.get("tokens", 0))
        rows[name] = (wall, tokens / wall, pss)
        print(f"| {name} | {wall:.0f} | {usage.get('calls', '?')} | {usage.get('dropped', '?')} | {tokens} "
              f"| {tokens / wall:.1f} | {pss:,.0f} "
              f"| {outcome} |", flush=True)
    # the plans are not the same text (sampling differs), so tokens/s compares the work, wall the wait
    per_member, one_call, shared = rows.values()
    print(f"\nshared / per member: wall time {shared[0] / per_member[0]:.2f}, swarm tokens/s "
          f"{shared[1] / per_member[1]:.2f}, memory {shared[2] / per_member[2]:.2f}; {SHARED_PARALLEL} calls at a "
          f"time / one: wall time {shared[0] / one_call[0]:.2f} (one plan each: a draft rejected or not moves a "
          "plan by tens of seconds)")


def main() -> None:
    throughput()
    if os.environ.get("BENCH_MODEL_PLAN", "1") != "0":
        swarm_plans()


if __name__ == "__main__":
    main()
