"""Processes that only tokenize (the runner, the policy server) keep torch out even where
it is installed, as this environment has it for the trainer adapters: the runner image has
no torch, and transformers would otherwise import it for every tokenizer (2.5 CPU-s and
460 MB a process). The tokens and the chat text must not change."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from swerollout.tokenizers import load_tokenizer
from swerollout_dev.policy_server.launch import SubprocessServer, launch

ROOT = Path(__file__).resolve().parents[2]
TEXT = "def add(a, b):\n    return a - b  # ünïcode<|im_end|>\n"
MESSAGES = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "fix `calc.add`\n<tool>x</tool>"},
]
TOKENIZE = """
import json, sys
from swerollout.tokenizers import keep_torch_out, load_tokenizer
keep_torch_out()
tok = load_tokenizer("qwen-2.5")
print(json.dumps({
    "ids": tok.encode(sys.argv[1], add_special_tokens=False),
    "chat": tok.apply_chat_template(json.loads(sys.argv[2]), tokenize=False, add_generation_prompt=True),
    "torch_blocked": sys.modules.get("torch", "absent") is None,
}))
"""


def _python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # Generous: a loaded two-core machine takes tens of seconds to import transformers.
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)


def test_torch_is_installed_here_so_the_tests_below_mean_something() -> None:
    assert importlib.util.find_spec("torch") is not None


def test_without_torch_the_tokens_and_the_chat_text_are_the_same() -> None:
    result = _python("-c", TOKENIZE, TEXT, json.dumps(MESSAGES))
    assert result.returncode == 0, result.stderr[-3000:]
    torchless = json.loads(result.stdout.splitlines()[-1])
    tok = load_tokenizer("qwen-2.5")
    assert torchless["torch_blocked"], "torch was imported after all"
    assert torchless["ids"] == tok.encode(TEXT, add_special_tokens=False)
    assert torchless["chat"] == tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)


def test_the_runner_entry_point_keeps_torch_out_before_it_imports_anything_else() -> None:
    # Without its pod environment the runner stops at its settings: far enough to see the block.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWEROLLOUT_")}
    probe = (
        "import runpy, sys\n"
        "try:\n    runpy.run_module('agent_runner', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as stop:\n    print(stop.code)\n"
        "print(sys.modules.get('torch', 'absent') is None)\n"
    )
    result = _python("-c", probe, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    stopped, torch_blocked = result.stdout.strip().splitlines()[-2:]
    assert "SWEROLLOUT_INGEST_URL" in stopped, result.stdout
    assert torch_blocked == "True", result.stdout


def test_a_policy_server_process_serves_without_torch_loaded() -> None:
    with launch("null", subprocess=True, tokenizer="qwen-2.5", ready_timeout=900) as server:
        assert isinstance(server, SubprocessServer)
        maps = Path(f"/proc/{server.process.pid}/maps").read_text()
    assert "libtokenizers" in maps or "tokenizers" in maps, "the server loaded no tokenizer: the check proves nothing"
    assert "/torch/" not in maps
