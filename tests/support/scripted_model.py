"""A scripted policy for loop tests: plays back turns (the policy side, not the code under test)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_runner.policy.model import FinishReason, ModelTurn, ToolCall

Step = ModelTurn | Exception | Callable[[list[dict[str, Any]]], ModelTurn]


def call(name: str, call_id: str = "call_1", **arguments: Any) -> ModelTurn:
    return ModelTurn(
        text="", tool_calls=[ToolCall(id=call_id, name=name, arguments=arguments)], finish_reason=FinishReason.STOP
    )


def bash(command: str) -> ModelTurn:
    return call("bash", command=command)


def text(content: str, finish_reason: FinishReason = FinishReason.STOP) -> ModelTurn:
    return ModelTurn(text=content, finish_reason=finish_reason)


ABORT = ModelTurn(text="", finish_reason=FinishReason.ABORT)


class ScriptedModel:
    """Implements agent_runner.policy.model.Model by replaying `script` (then raising if it runs out)."""

    def __init__(self, script: list[Step], *, context_tokens: int = 0) -> None:
        self.script = list(script)
        self.history: list[dict[str, Any]] = []
        self.calls = 0
        self._context_tokens = context_tokens

    async def generate(self, *, max_new_tokens: int | None = None) -> ModelTurn:
        self.calls += 1
        if not self.script:
            raise AssertionError("the scripted model ran out of turns")
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        turn = step(self.history) if callable(step) else step
        if turn.finish_reason != FinishReason.ABORT:
            message: dict[str, Any] = {"role": "assistant", "content": turn.text}
            if turn.tool_calls:
                message["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in turn.tool_calls
                ]
            self.history.append(message)
        return turn

    def add_messages(self, messages: list[dict[str, Any]]) -> None:
        self.history.extend(messages)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.history

    @property
    def context_tokens(self) -> int:
        return self._context_tokens
