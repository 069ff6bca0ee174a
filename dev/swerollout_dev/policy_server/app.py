"""HTTP layer: routes, request validation and error mapping (a thin shell around Engine).

Errors are JSON ``{"error": {"message", "type", "code", "field"}}``: 400 for a bad
request (the message names the field), 5xx for injected faults.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from swerollout_dev.policy_server import auth
from swerollout_dev.policy_server.chat import chat_completion
from swerollout_dev.policy_server.chat_format import ChatFormat
from swerollout_dev.policy_server.engine import Engine
from swerollout_dev.policy_server.errors import BadRequestError, InjectedFaultError
from swerollout_dev.policy_server.faults import FaultInjector
from swerollout_dev.policy_server.policies import PolicyContext, load_policy
from swerollout_dev.policy_server.settings import ServerSettings
from swerollout_dev.policy_server.wire import (
    AbortRequest,
    ChatCompletionRequest,
    ContinueRequest,
    FaultsUpdate,
    GenerateRequest,
    GenerateResponse,
    PauseRequest,
    UpdateWeightsFromDiskRequest,
    UpdateWeightVersionRequest,
)

VERSION = "swerollout-policy-server/0.1"
STANDIN_PREFIX = "/_standin"
"""Routes under this prefix are the stand-in's own; every other route is SGLang 0.5.23's."""
FAULTS_ROUTE = f"{STANDIN_PREFIX}/faults"
REQUESTS_ROUTE = f"{STANDIN_PREFIX}/requests"
ENGINE_KEY = web.AppKey("engine", Engine)
SETTINGS_KEY = web.AppKey("settings", ServerSettings)

Model = TypeVar("Model", bound=BaseModel)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str, *, kind: str, field: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status, "field": field}}
    return web.json_response(body, status=status)


def _describe(exc: ValidationError) -> tuple[str, str | None]:
    """One line per problem, each starting with the dotted path of the field."""
    parts: list[str] = []
    first_field: str | None = None
    for problem in exc.errors():
        path = ".".join(str(p) for p in problem["loc"])
        first_field = first_field or path or None
        parts.append(f"{path or 'body'}: {problem['msg']}")
    return "; ".join(parts), first_field


async def _parse(request: web.Request, model: type[Model], *, allow_empty: bool = False) -> Model:
    raw = await request.read()
    if not raw.strip():
        if allow_empty:
            return model()
        raise BadRequestError("the request body is empty; send a JSON object", field=None)
    try:
        payload = json.loads(raw)
    except ValueError as exc:
        raise BadRequestError(f"the request body is not valid JSON: {exc}") from exc
    if isinstance(payload, list) or (
        model is GenerateRequest
        and isinstance(payload, dict)
        and isinstance(payload.get("input_ids"), list)
        and payload["input_ids"]
        and isinstance(payload["input_ids"][0], list)
    ):
        raise BadRequestError(
            "input_ids: batched requests are not supported; send one prompt per request", field="input_ids"
        )
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        message, field = _describe(exc)
        raise BadRequestError(message, field=field) from exc


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadRequestError as exc:
        return _error(400, str(exc), kind="BadRequestError", field=exc.field)
    except InjectedFaultError as exc:
        return _error(exc.status, str(exc), kind="InjectedFault")


def _engine(request: web.Request) -> Engine:
    return request.app[ENGINE_KEY]


async def generate(request: web.Request) -> web.StreamResponse:
    body = await _parse(request, GenerateRequest)
    engine = _engine(request)
    if not body.stream:
        result = await engine.generate(body)
        return web.json_response(result.to_wire())
    # Faults and validation run before the 200 is sent, so errors keep their status.
    admitted = engine.admit(body)
    stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    try:
        await stream.prepare(request)
    except BaseException:
        engine.release(admitted)
        raise

    async def send(chunk: GenerateResponse) -> None:
        await stream.write(f"data: {json.dumps(chunk.to_wire())}\n\n".encode())

    final = await engine.run(admitted, on_progress=send)
    await send(final)
    await stream.write(b"data: [DONE]\n\n")
    await stream.write_eof()
    return stream


async def abort_request(request: web.Request) -> web.Response:
    """SGLang answers an empty 200 whether or not the exact rid was live."""
    body = await _parse(request, AbortRequest)
    _engine(request).abort(body.rid, abort_all=body.abort_all)
    return web.Response(status=200)


async def pause_generation(request: web.Request) -> web.Response:
    body = await _parse(request, PauseRequest, allow_empty=True)
    await _engine(request).pause(body.mode)
    return web.json_response({"message": "Generation paused successfully.", "status": "ok"})


async def continue_generation(request: web.Request) -> web.Response:
    await _parse(request, ContinueRequest, allow_empty=True)
    _engine(request).resume()
    return web.json_response({"message": "Generation continued successfully.", "status": "ok"})


async def update_weight_version(request: web.Request) -> web.Response:
    body = await _parse(request, UpdateWeightVersionRequest)
    engine = _engine(request)
    engine.update_weight_version(body.new_version, abort_all=body.abort_all_requests)
    return web.json_response(
        {"success": True, "message": f"weight version is now {body.new_version}", "new_version": body.new_version}
    )


async def update_weights_from_disk(request: web.Request) -> web.Response:
    """Trainer compatibility: accepted, no weights are read; weight_version (if given) applies."""
    body = await _parse(request, UpdateWeightsFromDiskRequest)
    engine = _engine(request)
    engine.update_weight_version(body.weight_version or engine.weight_version, abort_all=body.abort_all_requests)
    if body.flush_cache:
        engine.flush_cache()
    return web.json_response(
        {
            "success": True,
            "message": f"no weights loaded from {body.model_path} (policy server stand-in)",
            "num_paused_requests": 0,
        }
    )


async def flush_cache(request: web.Request) -> web.Response:
    """Empties the policy's prefix cache (tiny-lm keeps one); like SGLang, refused (400)
    while requests run."""
    engine = _engine(request)
    if engine.load()["num_total_reqs"]:
        return web.Response(status=400, text="Flush cache failed: there are running or waiting requests.\n")
    engine.flush_cache()
    return web.Response(
        status=200,
        text="Cache flushed.\nPlease check backend logs for more details. "
        "(When there are running or waiting requests, the operation will not be performed.)\n",
    )


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def ready(request: web.Request) -> web.Response:
    """SGLang 0.5.23's readiness: 503 while generation is paused (new requests are held)."""
    return web.Response(status=503 if _engine(request).paused is not None else 200)


async def health_generate(request: web.Request) -> web.Response:
    """Runs one decode step of the policy outside the request table (not counted as load)."""
    try:
        await _engine(request).probe()
    except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
        return _error(503, f"policy failed to generate: {exc}", kind="Unhealthy")
    return web.Response(status=200)


async def get_model_info(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    engine = _engine(request)
    return web.json_response(
        {
            "model_path": settings.model_name,
            "tokenizer_path": settings.tokenizer,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": engine.weight_version,
            "policy": settings.policy,
            "context_length": settings.context_length,
        }
    )


async def get_server_info(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    engine = _engine(request)
    # Never the keys: this route is open without an API key, and every pod that may reach
    # the server (its sandbox container too) could read the admin key here.
    server_args = settings.model_dump(mode="json", exclude={"api_key", "admin_api_key"})
    return web.json_response(
        {
            **server_args,
            "model_path": settings.model_name,
            "tokenizer_path": settings.tokenizer,
            "context_length": settings.context_length,
            "max_total_num_tokens": engine.limits.max_req_len + 1,
            "max_req_input_len": engine.limits.max_req_input_len,
            "enable_return_routed_experts": True,
            "version": VERSION,
            "weight_version": engine.weight_version,
            "paused": engine.paused,
            "faults": engine.faults.settings.model_dump(mode="json"),
            "requests_served": engine.requests_served,
            "aborted_requests": engine.aborted_requests,
        }
    )


async def v1_loads(request: web.Request) -> web.Response:
    engine = _engine(request)
    load = engine.load()
    entry = {
        "dp_rank": 0,
        **load,
        "token_usage": load["num_used_tokens"] / engine.context_length,
        "weight_version": engine.weight_version,
    }
    return web.json_response(
        {
            "timestamp": time.time(),
            "version": VERSION,
            "accelerator": None,
            "num_accelerators": 0,
            "loads": [entry],
        }
    )


async def v1_models(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    card = {"id": settings.model_name, "object": "model", "created": 0, "owned_by": "swerollout"}
    return web.json_response({"object": "list", "data": [card]})


async def chat_completions(request: web.Request) -> web.Response:
    body = await _parse(request, ChatCompletionRequest)
    settings = request.app[SETTINGS_KEY]
    result = await chat_completion(
        _engine(request), body, model_name=settings.model_name, default_max_tokens=settings.max_chat_tokens
    )
    return web.json_response(result)


async def get_faults(request: web.Request) -> web.Response:
    return web.json_response(_engine(request).faults.settings.model_dump(mode="json"))


async def set_faults(request: web.Request) -> web.Response:
    body = await _parse(request, FaultsUpdate)
    return web.json_response(_engine(request).faults.update(body).model_dump(mode="json"))


async def get_requests(request: web.Request) -> web.Response:
    """The last admitted requests, oldest first: what each sent and the images it carried, in order."""
    log = _engine(request).request_log
    return web.json_response({"requests": [record.model_dump(mode="json") for record in log]})


def build_engine(settings: ServerSettings) -> Engine:
    """Load the tokenizer and the policy (slow: seconds) and wire up the engine."""
    from swerollout.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(settings.tokenizer)
    chat_format = ChatFormat.from_tokenizer(tokenizer)
    context = PolicyContext(
        tokenizer=tokenizer,
        chat_format=chat_format,
        tasks_file=settings.tasks,
        seed=settings.seed,
        context_length=settings.context_length,
        oracle_ledger=settings.oracle_ledger,
    )
    policy = load_policy(settings.policy, context)
    return Engine(
        policy=policy,
        tokenizer=tokenizer,
        chat_format=chat_format,
        faults=FaultInjector(settings.faults, seed=settings.seed),
        weight_version=settings.weight_version,
        context_length=settings.context_length,
        seed=settings.seed,
    )


def create_app(settings: ServerSettings, engine: Engine | None = None) -> web.Application:
    keys = auth.middleware(settings.api_key, settings.admin_api_key, frozenset({FAULTS_ROUTE}))
    app = web.Application(middlewares=[keys, _errors], client_max_size=64 * 1024 * 1024)
    app[SETTINGS_KEY] = settings
    app[ENGINE_KEY] = engine or build_engine(settings)
    routes: list[tuple[str, str, Any]] = [
        ("POST", "/generate", generate),
        ("POST", "/abort_request", abort_request),
        ("POST", "/pause_generation", pause_generation),
        ("POST", "/continue_generation", continue_generation),
        ("POST", "/update_weight_version", update_weight_version),
        ("POST", "/update_weights_from_disk", update_weights_from_disk),
        ("POST", "/flush_cache", flush_cache),
        ("GET", "/flush_cache", flush_cache),
        ("GET", "/health", health),
        ("GET", "/ready", ready),
        ("GET", "/health_generate", health_generate),
        ("GET", "/get_model_info", get_model_info),
        ("GET", "/get_server_info", get_server_info),
        ("GET", "/v1/loads", v1_loads),
        ("GET", "/v1/models", v1_models),
        ("POST", "/v1/chat/completions", chat_completions),
        # Ours, not SGLang's: test-only fault injection, under one stand-in-only prefix.
        ("GET", FAULTS_ROUTE, get_faults),
        ("POST", FAULTS_ROUTE, set_faults),
        ("GET", REQUESTS_ROUTE, get_requests),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)

    async def _close(app: web.Application) -> None:
        app[ENGINE_KEY].close()

    app.on_shutdown.append(_close)
    return app
