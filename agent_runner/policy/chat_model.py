"""ChatModel: the validation agent's model, an OpenAI-compatible /v1/chat/completions client.

No token tracking: the history is OpenAI messages and the server applies its
own chat template. Transient failures (transport errors, timeouts, 429, 5xx)
are retried with exponential backoff; a chat completion has no side effects, so
re-sending one is safe. Everything else maps to agent_runner.policy.errors at once.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from agent_runner.policy.errors import ModelProtocolError, ModelTimeoutError, ModelUnavailableError
from agent_runner.policy.model import FinishReason, ModelTurn, ToolCall
from swerollout.api import v1alpha1
from swerollout.backoff import Backoff

_FINISH_REASONS = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.STOP,
    "function_call": FinishReason.STOP,
    "length": FinishReason.LENGTH,
    "abort": FinishReason.ABORT,
}


def chat_completions_url(endpoint: str) -> str:
    """Accept `http://host:port`, `.../v1` or the full `.../v1/chat/completions`."""
    base = endpoint.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if base.endswith("/v1"):
        return f"{base}/chat/completions"
    return f"{base}/v1/chat/completions"


CHAT_BACKOFF = Backoff(first_seconds=0.5, max_seconds=8.0, attempts=6)
"""A chat completion has no side effects, so 429, 5xx and transport errors are retried."""


class ChatModel:
    """Implements agent_runner.policy.model.Model over an OpenAI-compatible chat completions endpoint."""

    def __init__(
        self,
        endpoint: str,
        *,
        model: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        sampling: dict[str, Any] | None = None,
        api_key: str | None = None,
        request_timeout: float = 600.0,
        backoff: Backoff = CHAT_BACKOFF,
    ) -> None:
        """`sampling` holds extra request fields (temperature, top_p, seed, stop, max_tokens...)."""
        self.url = chat_completions_url(endpoint)
        self.model = model
        self.tools = tools or None
        self.sampling = dict(sampling or {})
        self.backoff = backoff
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(request_timeout, connect=10.0))
        self._messages: list[dict[str, Any]] = []
        self._context_tokens = 0

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> ChatModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- Model protocol ----------------------------------------------------

    def add_messages(self, messages: list[dict[str, Any]]) -> None:
        self._messages.extend(dict(message) for message in messages)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self._messages

    @property
    def context_tokens(self) -> int:
        """Prompt plus completion tokens of the last response (the server counts them)."""
        return self._context_tokens

    async def generate(self, *, max_new_tokens: int | None = None) -> ModelTurn:
        body: dict[str, Any] = {**self.sampling, "messages": self._messages}
        if self.model is not None:
            body["model"] = self.model
        if self.tools:
            body["tools"] = self.tools
        if max_new_tokens is not None:
            body["max_tokens"] = max_new_tokens
        data = await self._post(body)
        turn, assistant_message = self._parse(data)
        if turn.finish_reason != FinishReason.ABORT:
            # An aborted reply is dropped: the next generate() asks again from the same history.
            self._messages.append(assistant_message)
        return turn

    # -- internals ---------------------------------------------------------

    async def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        retrying = self.backoff.retrying(retryable=_worth_retrying, retry_after=_server_retry_after)
        try:
            async for attempt in retrying:
                with attempt:
                    try:
                        response = await self._client.post(self.url, json=body)
                    except httpx.TransportError as exc:  # timeouts included
                        raise _Unavailable(_describe(exc), timed_out=isinstance(exc, httpx.TimeoutException)) from exc
                    if response.status_code == 429 or response.status_code >= 500:
                        header = response.headers.get("Retry-After", "")
                        raise _Unavailable(
                            f"HTTP {response.status_code}: {response.text[:300]}",
                            retry_after=float(header) if header.isdigit() else None,
                        )
        except _Unavailable as exc:
            tries = retrying.schedule.retries + 1
            if exc.timed_out:
                raise ModelTimeoutError(f"POST {self.url} {exc} after {tries} attempts") from exc
            raise ModelUnavailableError(f"POST {self.url} failed {tries} times; last: {exc}") from exc
        if response.status_code == 404:
            raise ModelProtocolError(
                f"POST {self.url} answered 404: no OpenAI-compatible chat completions endpoint there. "
                "Point the endpoint at the server root (http://host:port) or its /v1 path."
            )
        if response.status_code >= 400:
            raise ModelProtocolError(
                f"POST {self.url} rejected the request: HTTP {response.status_code}: {response.text[:500]}"
            )
        try:
            data = response.json()
        except ValueError as exc:
            raise ModelProtocolError(f"POST {self.url} answered non-JSON: {response.text[:300]!r}") from exc
        if not isinstance(data, dict):
            raise ModelProtocolError(f"POST {self.url} answered {type(data).__name__}, not a JSON object")
        return data

    def _parse(self, data: dict[str, Any]) -> tuple[ModelTurn, dict[str, Any]]:
        try:
            choice = data["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ModelProtocolError(f"chat completion without choices[0].message: {str(data)[:300]}") from exc
        usage = data.get("usage") or {}
        if isinstance(usage, dict) and isinstance(usage.get("total_tokens"), int):
            self._context_tokens = usage["total_tokens"]
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        calls: list[ToolCall] = []
        problems: list[str] = []
        raw_calls = message.get("tool_calls") or []
        for index, raw in enumerate(raw_calls):
            function = raw.get("function") or {}
            name = function.get("name")
            arguments = function.get("arguments") or "{}"
            try:
                parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
            except ValueError as exc:
                problems.append(f"tool call {index} ({name}): arguments are not valid JSON: {exc}")
                continue
            if not isinstance(name, str) or not isinstance(parsed, dict):
                problems.append(f"tool call {index}: needs a function name and an arguments object")
                continue
            calls.append(ToolCall(id=str(raw.get("id") or f"call_{index}"), name=name, arguments=parsed))
        finish = _FINISH_REASONS.get(str(choice.get("finish_reason")), FinishReason.STOP)
        assistant: dict[str, Any] = {"role": "assistant", "content": content}
        if raw_calls:
            assistant["tool_calls"] = raw_calls
        turn = ModelTurn(
            text=content,
            tool_calls=calls,
            parse_error="; ".join(problems) or None,
            finish_reason=finish,
            new_tokens=int(usage.get("completion_tokens", 0)) if isinstance(usage, dict) else 0,
        )
        return turn, assistant


def chat_model_from_spec(
    inference: v1alpha1.Inference, *, tools: list[dict[str, Any]] | None, api_key: str | None = None
) -> ChatModel:
    """The ChatAgent's model for a SWERollout's `spec.inference` (OpenAI field names)."""
    sampling_spec = inference.sampling
    sampling: dict[str, Any] = {
        "temperature": sampling_spec.temperature,
        "top_p": sampling_spec.top_p,
        "max_tokens": sampling_spec.max_new_tokens,
    }
    if sampling_spec.top_k != -1:
        sampling["top_k"] = sampling_spec.top_k  # not OpenAI's, but SGLang and vLLM accept it
    if sampling_spec.seed is not None:
        sampling["seed"] = sampling_spec.seed
    if sampling_spec.stop:
        sampling["stop"] = list(sampling_spec.stop)
    return ChatModel(
        inference.endpoint,
        model=inference.model,
        tools=tools,
        sampling=sampling,
        api_key=api_key,
        request_timeout=float(inference.request_timeout_seconds),
    )


class _Unavailable(Exception):
    """A try of a chat completion that may succeed later: a transport error, a timeout, 429 or 5xx."""

    def __init__(self, problem: str, *, timed_out: bool = False, retry_after: float | None = None) -> None:
        super().__init__(problem)
        self.timed_out = timed_out
        self.retry_after = retry_after


def _worth_retrying(exc: BaseException) -> bool:
    return isinstance(exc, _Unavailable)


def _server_retry_after(exc: BaseException) -> float | None:
    return exc.retry_after if isinstance(exc, _Unavailable) else None


def _describe(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"
