"""SWERollout v1alpha1: one custom resource per RL sample.

These models are the single source of truth for the API: the CRD YAML under
crds/ and in the Helm chart is generated from them (``make crds``), the operator
validates what it reads with them, and the trainer client builds objects with
them. Every string and list has a bound, both to keep objects far below etcd's
request limit and so the API server can cost-check the CEL rules.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from .base import ApiModel, cel

GROUP = "swerollout.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SWERollout"
PLURAL = "swerollouts"
SINGULAR = "swerollout"
SHORT_NAMES = ["swer"]
CATEGORIES = ["swerollout", "rl"]

# Labels the operator and the client put on objects.
LABEL_BATCH = "swerollout.io/batch"
LABEL_MEMBER = "swerollout.io/member"
LABEL_ROLLOUT = "swerollout.io/rollout"
LABEL_COMPONENT = "swerollout.io/component"
FINALIZER = "swerollout.io/cleanup"

KiB = 1024
MiB = 1024 * KiB

Name = Annotated[str, StringConstraints(min_length=1, max_length=253)]
ShortText = Annotated[str, StringConstraints(max_length=1024)]
TestName = Annotated[str, StringConstraints(min_length=1, max_length=2048)]
Quantity = Annotated[
    str,
    StringConstraints(
        max_length=64,
        pattern=r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$",
    ),
]
Template = Annotated[str, StringConstraints(max_length=64 * KiB)]


class Phase(str, Enum):
    """Where a rollout is in its life. The transitions live in the operator's phase machine."""

    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    ABORTED = "Aborted"
    RESUMING = "Resuming"
    EVALUATING = "Evaluating"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def is_terminal(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


class Mode(str, Enum):
    """Which exit statuses are graded: train grades only `submitted`, validate grades every `submitted*`."""

    TRAIN = "train"
    VALIDATE = "validate"


class AgentKind(str, Enum):
    RL_TOKEN_AGENT = "RLTokenAgent"
    """Token-in/token-out against SGLang /generate with function calling; records exact tokens."""
    TEXT_BASH_AGENT = "TextBashAgent"
    """Token-in/token-out, one fenced bash block per turn (no tool-call format)."""
    CHAT_AGENT = "ChatAgent"
    """OpenAI-compatible /v1/chat/completions, no token tracking (validation runs)."""


class ToolName(str, Enum):
    BASH = "bash"
    STR_REPLACE_EDITOR = "str_replace_editor"
    SUBMIT = "submit"


class LogParser(str, Enum):
    """How test output is read into per-test results (SWE-bench's parsers where installed)."""

    PYTEST = "pytest"
    PYTEST_V2 = "pytest_v2"
    PYTEST_OPTIONS = "pytest_options"
    DJANGO = "django"
    SYMPY = "sympy"
    SEABORN = "seaborn"
    MATPLOTLIB = "matplotlib"


class EvalType(str, Enum):
    """SWE-bench's grading rule: both FAIL_TO_PASS and PASS_TO_PASS, or FAIL_TO_PASS only."""

    PASS_AND_FAIL = "pass_and_fail"
    FAIL_ONLY = "fail_only"


class Evaluation(ApiModel):
    """How the reward is computed for this instance (SWE-bench fields)."""

    fail_to_pass: list[TestName] = Field(default_factory=list, max_length=4096)
    """Tests that fail before the gold patch and must pass after the candidate patch."""
    pass_to_pass: list[TestName] = Field(default_factory=list, max_length=16384)
    """Tests that pass before and must still pass after the candidate patch."""
    test_patch: Annotated[str, StringConstraints(max_length=256 * KiB)] = ""
    """Unified diff that adds or updates the tests; applied in the eval pod after the candidate patch."""
    eval_script: Annotated[str, StringConstraints(max_length=128 * KiB)] = ""
    """Bash script run in the eval pod's fresh sandbox after the patches are applied. It prints SWE-bench's start/end test-output markers around the test run. Empty: run `pytest -rA` on the tests named in failToPass and passToPass."""
    log_parser: LogParser = LogParser.PYTEST
    """Parser that turns the eval script's output into per-test statuses."""
    eval_type: EvalType = EvalType.PASS_AND_FAIL
    """Whether passToPass counts toward `resolved`."""


class Instance(ApiModel):
    """The SWE-bench style task. Immutable: a different task is a different SWERollout."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel("self == oldSelf", "spec.instance is immutable; create a new SWERollout for another task")
            ]
        }
    }

    instance_id: Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/+-]*$")]
    """SWE-bench instance id, e.g. `astropy__astropy-12907`."""
    repo: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    """Repository the task comes from, e.g. `astropy/astropy`."""
    base_commit: Annotated[str, StringConstraints(min_length=7, max_length=64, pattern=r"^[0-9a-f]{7,64}$")]
    """Commit the sandbox is checked out at (hex)."""
    image: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    """Container image of the sandbox with the repository at `workdir`. In the embedded dev mode, `file://<absolute path of a git repository>` gives a fresh checkout of that repository at baseCommit."""
    problem_statement: Annotated[str, StringConstraints(min_length=1, max_length=256 * KiB)]
    """The issue text shown to the agent."""
    issue_images: list[Annotated[str, StringConstraints(max_length=2048)]] = Field(default_factory=list, max_length=16)
    """URLs of images attached to the issue (multimodal tasks)."""
    workdir: Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^/")] = "/testbed"
    """Absolute path of the repository inside the sandbox."""
    evaluation: Evaluation = Field(default_factory=Evaluation)
    """How the reward is computed."""


class Templates(ApiModel):
    """Jinja prompt templates, SWE-agent style. Unset ones use the built-in defaults."""

    system_template: Template | None = None
    """System message."""
    instance_template: Template | None = None
    """First user message; sees `problem_statement`, `working_dir`, `repo`."""
    next_step_template: Template | None = None
    """Wraps each observation; sees `observation`."""
    next_step_no_output_template: Template | None = None
    """Used when a command printed nothing."""
    truncated_observation_template: Template | None = None
    """Used when an observation is longer than `maxObservationChars`; sees `observation`, `elided_chars`, `max_observation_chars`."""
    format_error_template: Template | None = None
    """Sent back when the model's reply has no valid action; sees `error`."""


class Tools(ApiModel):
    """The tools the agent may call."""

    enabled: list[ToolName] = Field(
        default_factory=lambda: [ToolName.BASH, ToolName.STR_REPLACE_EDITOR, ToolName.SUBMIT],
        min_length=1,
        max_length=8,
    )
    """Tools offered to the model (function calling); TextBashAgent always uses bash and submit."""
    blocklist: list[Annotated[str, StringConstraints(min_length=1, max_length=256)]] = Field(
        default_factory=lambda: ["vim", "vi", "emacs", "nano", "nohup", "gdb", "less", "tail -f", "python -m venv"],
        max_length=256,
    )
    """Command prefixes refused without running them (interactive or session-breaking programs)."""
    max_observation_chars: int = Field(default=10_000, ge=100, le=1_000_000)
    """Observations longer than this are truncated (characters)."""


class Agent(ApiModel):
    """The agent loop and its limits."""

    kind: AgentKind = AgentKind.RL_TOKEN_AGENT
    """Which agent runs the loop."""
    templates: Templates = Field(default_factory=Templates)
    """Prompt templates; unset ones use the defaults."""
    tools: Tools = Field(default_factory=Tools)
    """Tool selection and observation limits."""
    max_turns: int = Field(default=50, ge=1, le=1000)
    """Model calls before the run ends with `exit_max_iter_out`."""
    max_requeries: int = Field(default=3, ge=0, le=20)
    """Consecutive format errors tolerated before `exit_format`."""
    command_timeout_seconds: int = Field(default=120, ge=1, le=3600)
    """Wall-clock limit of one tool command (seconds); exceeding it interrupts the command."""
    total_execution_timeout_seconds: int = Field(default=1800, ge=1, le=86400)
    """Total tool execution time before `exit_total_execution_time` (seconds)."""


class Sampling(ApiModel):
    """Sampling parameters sent with every generate request."""

    temperature: float = Field(default=1.0, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=-1, ge=-1)
    """-1 disables top-k."""
    max_new_tokens: int = Field(default=4096, ge=1, le=1_048_576)
    """Upper bound of tokens per model turn; the context budget may lower it."""
    seed: int | None = Field(default=None, ge=0)
    """Sampling seed, for reproducible runs on servers that honour it."""
    stop: list[Annotated[str, StringConstraints(min_length=1, max_length=256)]] = Field(default_factory=list, max_length=16)
    """Extra stop strings."""


class Inference(ApiModel):
    """The policy server."""

    endpoint: Annotated[str, StringConstraints(min_length=1, max_length=2048, pattern=r"^https?://[^\s]+$")]
    """Base URL of the SGLang server (RLTokenAgent, TextBashAgent) or of an OpenAI-compatible server (ChatAgent)."""
    tokenizer: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = None
    """Tokenizer whose chat template renders the conversation: a bundled name (e.g. `qwen-2.5`, `qwen-3`, `glm-4`, `deepseek-v3`) or a directory path. Required unless the agent is a ChatAgent."""
    model: Annotated[str, StringConstraints(max_length=256)] | None = None
    """Model name sent to OpenAI-compatible servers (ChatAgent)."""
    sampling: Sampling = Field(default_factory=Sampling)
    """Sampling parameters."""
    max_context_tokens: int = Field(default=32768, ge=256, le=4_194_304)
    """Prompt plus generated tokens may not exceed this; reaching it ends the run with `exit_context`. Counts tokens generated before an abort."""
    weight_version: Annotated[str, StringConstraints(max_length=128)] | None = None
    """Weight version the trainer expects; recorded per token when the server reports none."""
    request_timeout_seconds: int = Field(default=600, ge=1, le=86400)
    """Timeout of one generate request (seconds)."""
    return_routed_experts: bool = False
    """Ask SGLang for MoE routing decisions and keep them in the trajectory."""


class Toleration(ApiModel):
    """A pod toleration (core/v1 Toleration)."""

    key: Annotated[str, StringConstraints(max_length=316)] | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: Annotated[str, StringConstraints(max_length=63)] | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class Resources(ApiModel):
    """CPU and memory for a container (core/v1 quantities, e.g. `500m`, `2Gi`)."""

    requests: dict[str, Quantity] = Field(default_factory=dict, max_length=8)
    limits: dict[str, Quantity] = Field(default_factory=dict, max_length=8)


class Sandbox(ApiModel):
    """Where and how the rollout pod runs."""

    resources: Resources = Field(
        default_factory=lambda: Resources(requests={"cpu": "500m", "memory": "1Gi"}, limits={"memory": "4Gi"})
    )
    """Resources of the sandbox container."""
    node_selector: dict[str, Annotated[str, StringConstraints(max_length=63)]] = Field(default_factory=dict, max_length=32)
    """Pod nodeSelector."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Pod tolerations."""
    runtime_class_name: Annotated[str, StringConstraints(max_length=253)] | None = None
    """RuntimeClass for stronger isolation (e.g. gVisor, Kata)."""
    image_pull_secrets: list[Annotated[str, StringConstraints(min_length=1, max_length=253)]] = Field(default_factory=list, max_length=8)
    """Names of Secrets in the namespace used to pull the task image."""
    startup_timeout_seconds: int = Field(default=600, ge=10, le=86400)
    """How long the pod may take to become ready before the rollout fails with the reason (image pull, scheduling)."""
    keep_alive_seconds_after_abort: int = Field(default=1800, ge=0, le=7 * 86400)
    """How long an aborted rollout keeps its live pod for a resume on the same sandbox; after that the pod is reclaimed."""


class Reward(ApiModel):
    """Reward evaluation in a separate, clean pod."""

    enabled: bool = True
    """Run the eval pod after the rollout; false leaves `status.reward` unset."""
    timeout_seconds: int = Field(default=1800, ge=10, le=86400)
    """Limit for the whole evaluation (seconds)."""
    resources: Resources | None = None
    """Resources of the eval sandbox; defaults to the rollout sandbox's."""


class SWERolloutSpec(ApiModel):
    """Desired state of one rollout."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel(
                    "self.agent.kind == 'ChatAgent' || has(self.inference.tokenizer)",
                    "spec.inference.tokenizer is required for token-tracking agents (RLTokenAgent, TextBashAgent); "
                    "set it to a bundled name such as qwen-2.5 or use agent.kind ChatAgent",
                    field_path=".inference.tokenizer",
                ),
                cel(
                    "self.mode == oldSelf.mode",
                    "spec.mode is immutable",
                    field_path=".mode",
                ),
            ]
        }
    }

    instance: Instance
    """The task. Immutable."""
    inference: Inference
    """The policy server."""
    agent: Agent = Field(default_factory=Agent)
    """The agent loop and its limits."""
    sandbox: Sandbox = Field(default_factory=Sandbox)
    """Pod placement, resources and lifetime."""
    reward: Reward = Field(default_factory=Reward)
    """Reward evaluation."""
    mode: Mode = Mode.TRAIN
    """train or validate; decides which exit statuses are graded. Immutable."""
    suspend: bool = False
    """true aborts a running rollout at once and keeps its pod alive (up to keepAliveSecondsAfterAbort); false again resumes it on the same pod."""


class ConditionStatus(str, Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ConditionType(str, Enum):
    SANDBOX_READY = "SandboxReady"
    """Set when the rollout pod is running and its sandbox answers; False with the reason when it cannot start."""
    GENERATING = "Generating"
    """Set when the runner is working on an assignment (run or resume)."""
    SUSPENDED = "Suspended"
    """Set when the rollout is aborted and holds a snapshot; False once resumed."""
    EVALUATED = "Evaluated"
    """Set when the reward is known (or skipped by exit-status gating)."""
    COMPLETE = "Complete"
    """Set when the rollout reached Succeeded or Failed; the reason says which and why."""


class Condition(ApiModel):
    """A metav1.Condition."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=316)]
    status: ConditionStatus
    observed_generation: int | None = Field(default=None, ge=0)
    last_transition_time: datetime
    reason: Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")]
    message: Annotated[str, StringConstraints(max_length=32768)] = ""


class SandboxHandle(ApiModel):
    """The live pod that holds the sandbox; kept across aborts so resume continues there."""

    pod_name: Name | None = None
    pod_uid: ShortText | None = Field(default=None, alias="podUID")
    pod_ip: ShortText | None = Field(default=None, alias="podIP")
    node_name: ShortText | None = None
    started_at: datetime | None = None
    """When the sandbox became ready."""
    reclaimed_at: datetime | None = None
    """When the pod was deleted after keepAliveSecondsAfterAbort, if it was."""


class ObjectRef(ApiModel):
    """A blob in the result store; the payload never goes through the API server."""

    ref: Annotated[str, StringConstraints(min_length=1, max_length=2048)]
    """Store URI, e.g. `file:///data/objects/ab/cd...` or `s3://bucket/key`."""
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    bytes: int = Field(ge=0)


class Partial(ApiModel):
    """The snapshot of an aborted run, from which resume continues."""

    snapshot: ObjectRef
    turns: int = Field(ge=0)
    tokens: int = Field(ge=0)
    """Tokens in the context at the abort (prompt and generated)."""
    weight_version: ShortText | None = None
    """Weight version of the last generated token."""
    aborted_at: datetime
    reason: ShortText = ""
    """What asked for the abort: `Suspended` (spec.suspend) or `InferenceAborted` (the server aborted the request)."""


class Progress(ApiModel):
    """Coalesced progress (at most one update every few seconds)."""

    turns: int = Field(default=0, ge=0)
    tokens: int = Field(default=0, ge=0)
    """Tokens in the context (prompt and generated)."""
    generated_tokens: int = Field(default=0, ge=0)
    """Tokens sampled by the policy so far."""
    updated_at: datetime | None = None


class Result(ApiModel):
    """The finished trajectory."""

    exit_status: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    """SWE-agent exit status: submitted, exit_context, exit_format, exit_command_timeout, exit_total_execution_time, exit_max_iter_out, exit_environment_error, exit_api, exit_error; an error exit whose working-tree diff was recovered and submitted reads `submitted (exit_...)`."""
    turns: int = Field(ge=0)
    prompt_tokens: int = Field(ge=0)
    response_tokens: int = Field(ge=0)
    truncated: bool = False
    """True when the run ended on the context limit."""
    has_patch: bool = False
    trajectory: ObjectRef | None = None
    """The token-exact trajectory (swerollout.wire.trajectory encoding)."""
    patch: ObjectRef | None = None
    """The submission patch, as the eval pod receives it."""


class EvaluationState(ApiModel):
    """The eval pod of a finished rollout."""

    attempt: int = Field(default=1, ge=1)
    pod_name: Name | None = None
    started_at: datetime | None = None


class RewardStatus(ApiModel):
    """The graded outcome."""

    value: float
    resolved: bool
    graded: bool = True
    """False when exit-status gating skipped the evaluation (reward 0)."""
    fail_to_pass_passed: int = Field(default=0, ge=0)
    fail_to_pass_total: int = Field(default=0, ge=0)
    pass_to_pass_passed: int = Field(default=0, ge=0)
    pass_to_pass_total: int = Field(default=0, ge=0)
    report: ObjectRef | None = None
    message: ShortText = ""


class SWERolloutStatus(ApiModel):
    """Observed state, written only by the operator."""

    phase: Phase = Phase.PENDING
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observed_generation: int | None = Field(default=None, ge=0)
    attempts: int = Field(default=0, ge=0)
    """Pods started for this rollout (a replay into a fresh pod adds one)."""
    replay: bool = False
    """The current pod replaced a lost one: the runner replays the recorded actions before resuming."""
    sandbox: SandboxHandle | None = None
    progress: Progress | None = None
    partial: Partial | None = None
    result: Result | None = None
    evaluation: EvaluationState | None = None
    reward: RewardStatus | None = None
    message: Annotated[str, StringConstraints(max_length=32768)] = ""
    """Human-readable summary of the latest phase change."""
    start_time: datetime | None = None
    completion_time: datetime | None = None


class ObjectMeta(ApiModel):
    """The subset of metav1.ObjectMeta the client sets."""

    model_config = ApiModel.model_config | {"extra": "allow"}

    name: Name | None = None
    generate_name: Name | None = None
    namespace: Name | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class SWERollout(ApiModel):
    """One RL sample: a task, a policy and a sandbox."""

    api_version: Literal["swerollout.io/v1alpha1"] = API_VERSION  # type: ignore[assignment]
    kind: Literal["SWERollout"] = KIND  # type: ignore[assignment]
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SWERolloutSpec
    status: SWERolloutStatus | None = None

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> "SWERollout":
        """Parse an object as read from the API server (unknown status fields are an error)."""
        return cls.model_validate(obj)
