"""Scripted policies: `oracle` solves known tasks with their gold patch, `null` gives up.

Both decode the prompt, decide what to say from the conversation so far, and
emit that reply as tokens followed by the template's end-of-turn token (the one
the template puts after a tool call, for tool calls). Replies follow the
prompt's action format: a tool call in the template's own markup (Hermes JSON,
GLM arg_key, Qwen XML; see tool_markup.py) when the prompt offers tools,
otherwise one fenced ```bash block (the text format's submit action is the bash
command ``submit``).

Logprobs: a scripted policy has no distribution, so every token's logprob is the
constant SCRIPTED_LOGPROB (0.0, i.e. probability 1).

Oracle turns (counted as assistant turns already in the prompt):
- with a ledger of N (``--oracle-ledger N``), turns 0..N-1: a ``bash`` call that
  appends ``step <turn>`` to ``LEDGER_FILE`` in the working directory, so the final
  patch shows how many times each of these commands ran;
- the next turn: a ``bash`` call that writes the gold patch to a temporary file
  through a heredoc and applies it with ``git apply`` from the working directory;
- every later turn: ``submit``.
A prompt that matches no task gets a plain-text reply saying so (no action), so
the mistake shows up in the trajectory instead of as an empty submission.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from swerollout_dev.policy_server.chat_format import ChatFormat
from swerollout_dev.policy_server.errors import PolicyConfigError
from swerollout_dev.policy_server.policies import PolicyContext, SamplingConfig, TokenSample

SCRIPTED_LOGPROB = 0.0
SUBMIT_COMMAND = "submit"
"""The text format's submit action: the literal bash command ``submit``."""
HEREDOC_DELIMITER = "SWEROLLOUT_GOLD_PATCH_EOF"
LEDGER_FILE = ".swerollout-ledger"
"""Where the oracle's ledger turns write, one line per command run."""


def ledger_command(step: int) -> str:
    return f"echo 'step {step}' >> {LEDGER_FILE}"


class OracleTask(BaseModel):
    """The fields of a SWE-bench instance the oracle uses; other fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    instance_id: str
    patch: str
    problem_statement: str = ""


def load_tasks(path: Path) -> list[OracleTask]:
    """Read a JSONL file of SWE-bench instances that carry their gold ``patch``."""
    tasks: list[OracleTask] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PolicyConfigError(f"cannot read tasks file {path}: {exc}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            tasks.append(OracleTask.model_validate(json.loads(line)))
        except (ValueError, ValidationError) as exc:
            raise PolicyConfigError(
                f"{path}:{number}: not a SWE-bench instance with instance_id and patch: {exc}"
            ) from exc
    if not tasks:
        raise PolicyConfigError(f"tasks file {path} holds no instances")
    return tasks


def apply_patch_command(patch: str) -> str:
    """Bash that applies a unified diff in the current directory, without touching the repo
    tree with the patch file itself (it goes to mktemp, so the submission diff stays clean)."""
    if HEREDOC_DELIMITER in patch:
        raise PolicyConfigError(f"the gold patch contains the heredoc delimiter {HEREDOC_DELIMITER}")
    body = patch if patch.endswith("\n") else patch + "\n"
    return (
        'patch_file="$(mktemp)" && cat > "$patch_file" <<\''
        + HEREDOC_DELIMITER
        + "'\n"
        + body
        + HEREDOC_DELIMITER
        + "\n"
        + 'git apply --whitespace=nowarn "$patch_file" && rm -f "$patch_file"'
    )


@dataclass(frozen=True)
class Reply:
    text: str
    tool_call: bool = False
    """The reply is a tool call (some templates end such a turn with another token)."""


@dataclass
class ScriptedGeneration:
    tokens: list[int]
    position: int = field(default=0)

    def next_token(self) -> TokenSample | None:
        if self.position >= len(self.tokens):
            return None
        token = self.tokens[self.position]
        self.position += 1
        return TokenSample(token_id=token, logprob=SCRIPTED_LOGPROB)


class _ScriptedPolicy:
    name = "scripted"
    offload = False

    def __init__(self, context: PolicyContext) -> None:
        self._tokenizer = context.tokenizer
        self._format: ChatFormat = context.chat_format

    def start(self, input_ids: list[int], sampling: SamplingConfig) -> ScriptedGeneration:
        # A context that ends inside an assistant turn (a partial reply kept across an
        # abort) is continued, as a language model continues it: when the partial is the
        # start of the reply this policy gives at the turn's opening, the rest follows.
        opened = self._open_turn(input_ids)
        if opened is not None and opened < len(input_ids):
            tokens = self._reply_tokens(input_ids[:opened])
            partial = input_ids[opened:]
            if tokens[: len(partial)] == partial:
                return ScriptedGeneration(tokens, position=len(partial))
        return ScriptedGeneration(self._reply_tokens(input_ids))

    def _reply_tokens(self, input_ids: list[int]) -> list[int]:
        reply = self.reply(str(self._tokenizer.decode(input_ids, skip_special_tokens=False)))
        tokens = list(self._tokenizer.encode(reply.text, add_special_tokens=False))
        end = self._format.end_after_tool_call_id if reply.tool_call else self._format.end_of_turn_id
        return tokens + [end]

    def _open_turn(self, input_ids: list[int]) -> int | None:
        """Where the last assistant turn's sampled part starts, when no end-of-turn token follows it."""
        header = list(self._tokenizer.encode(self._format.assistant_header, add_special_tokens=False))
        if not header:
            return None
        for at in range(len(input_ids) - len(header), -1, -1):
            if input_ids[at : at + len(header)] == header:
                start = at + len(header)
                return None if set(input_ids[start:]) & self._format.stop_ids else start
        return None

    def reply(self, prompt: str) -> Reply:
        raise NotImplementedError

    def _action(self, prompt: str, *, tool: str, arguments: dict[str, Any], thought: str) -> Reply:
        markup = self._format.markup
        if markup is not None and self._format.tools_offered(prompt):
            return Reply(markup.render(tool, arguments), tool_call=True)
        # In the text format, a call without a command (submit) is the `submit` command.
        command = arguments.get("command", SUBMIT_COMMAND)
        return Reply(f"{thought}\n\n```bash\n{command}\n```")

    def _submit(self, prompt: str) -> Reply:
        return self._action(prompt, tool="submit", arguments={}, thought="Submitting.")


class NullPolicy(_ScriptedPolicy):
    """Submits at once, without changing anything."""

    name = "null"

    def reply(self, prompt: str) -> Reply:
        return self._submit(prompt)


class OraclePolicy(_ScriptedPolicy):
    """Applies the recognised task's gold patch, then submits."""

    name = "oracle"

    def __init__(self, context: PolicyContext) -> None:
        super().__init__(context)
        if context.tasks_file is None:
            raise PolicyConfigError("the oracle policy needs --tasks FILE (JSONL of instances with `patch`)")
        self._tasks = load_tasks(context.tasks_file)
        self._ledger = context.oracle_ledger

    def find_task(self, prompt: str) -> OracleTask | None:
        """The task whose instance_id (longest match wins) or problem statement the prompt holds."""
        by_id = [t for t in self._tasks if t.instance_id in prompt]
        if by_id:
            return max(by_id, key=lambda t: len(t.instance_id))
        flat_prompt = _squash(prompt)
        for task in self._tasks:
            statement = _squash(task.problem_statement)[:300]
            if statement and statement in flat_prompt:
                return task
        return None

    def reply(self, prompt: str) -> Reply:
        task = self.find_task(prompt)
        if task is None:
            return Reply(
                "I do not recognise this task: no instance_id or problem statement "
                "from the oracle's tasks file is in the prompt."
            )
        turn = self._format.prior_assistant_turns(prompt)
        if turn < self._ledger:
            return self._action(
                prompt,
                tool="bash",
                arguments={"command": ledger_command(turn)},
                thought=f"Ledger step {turn}.",
            )
        if turn > self._ledger:
            return self._submit(prompt)
        return self._action(
            prompt,
            tool="bash",
            arguments={"command": apply_patch_command(task.patch)},
            thought=f"Applying the reference fix for {task.instance_id}.",
        )


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
