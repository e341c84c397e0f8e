"""``swarm model-service``: serve one batched local model to every member of this host.

    swarm model-service --listen 127.0.0.1:8090 [--model PATH] [--slots 8] [--threads 2]

Members then think with ``--llm openai --llm-url http://127.0.0.1:8090/v1``
(``swarm plan`` and ``make swarm`` wire this up themselves). It prints
``model service ready at URL`` once the model is loaded, so a caller can wait
for that line, and runs until SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading

import structlog

from agents.cli.errors import CommandError, UsageError


def cmd_model_service(args: argparse.Namespace) -> int:
    from agents.llm.base import LLMError
    from agents.llm.model_files import ModelFileError, resolve
    host, _, port_text = args.listen.rpartition(":")
    if not port_text.isdigit() or int(port_text) > 65535:
        raise UsageError(f"--listen wants HOST:PORT (for example 127.0.0.1:8090, port 0 for any), not {args.listen!r}")
    host, port = host or "0.0.0.0", int(port_text)
    if args.slots < 1 or args.threads < 1 or args.ctx_per_slot < 256:
        raise UsageError("--slots and --threads must be at least 1 and --ctx-per-slot at least 256")
    try:
        file = resolve(args.model)
    except ModelFileError as exc:
        raise CommandError(str(exc)) from None
    try:
        import llama_cpp  # noqa: F401 (only to say clearly that it is missing)
    except ImportError:
        raise CommandError("llama-cpp-python is not installed; run 'make install' (it builds it)") from None
    from agents.llm.batching import BatchedModel
    from agents.llm.service import ModelService

    try:
        model = BatchedModel(file.path, slots=args.slots, ctx_per_slot=args.ctx_per_slot, threads=args.threads)
    except LLMError as exc:
        raise CommandError(str(exc)) from None
    try:
        service = ModelService(model, f"{file.name}@{file.sha256[:16]}", host, port, args.request_timeout)
    except OSError as exc:
        model.close()
        raise CommandError(f"cannot listen on {args.listen}: {exc.strerror}; choose another --listen") from None
    stopping = threading.Event()

    def stop(*_: object) -> None:
        if not stopping.is_set():
            stopping.set()
            threading.Thread(target=service.http.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    bound_host, bound_port = service.address
    url = f"http://{bound_host}:{bound_port}/v1"
    structlog.get_logger("swarm.model").info("model service ready", url=url, model=file.name, slots=args.slots,
                                             threads=args.threads, pid=os.getpid())
    print(f"model service ready at {url} ({file.name}, {args.slots} slots, {args.threads} threads)", flush=True)
    try:
        service.serve_forever()
    finally:
        service.http.server_close()
        model.close()
    return 0


def add_command(sub: argparse._SubParsersAction) -> None:
    service = sub.add_parser("model-service",
                             help="serve one batched local model to every member of this host (OpenAI API)")
    service.add_argument("--listen", default="127.0.0.1:8090", metavar="HOST:PORT",
                         help="where to answer (port 0: any free port; the ready line names it)")
    service.add_argument("--model", metavar="PATH", help="a GGUF file (default: SWARM_MODEL, else the packaged Qwen 0.5B)")
    service.add_argument("--slots", type=int, default=8, help="requests decoded together (default 8)")
    service.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                         help="CPU threads for the model (default: every core; the members then need none)")
    service.add_argument("--ctx-per-slot", type=int, default=2048, help="tokens of prompt plus answer per request")
    service.add_argument("--request-timeout", type=float, default=120.0,
                         help="seconds a request may take before it is abandoned (504)")
    service.set_defaults(run=cmd_model_service)
