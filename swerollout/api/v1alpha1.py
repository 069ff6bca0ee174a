"""SWERollout v1alpha1: one custom resource per RL sample, and SWERolloutBatch, the
optional object through which a whole batch of them is suspended and resumed at once.

These models are the single source of truth for the API: the CRD YAML under
crds/ and in the Helm chart is generated from them (``make crds``), the operator
validates what it reads with them, and the trainer client builds objects with
them. Every string and list has a bound, both to keep objects far below etcd's
request limit and so the API server can cost-check the CEL rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from swerollout.api.data_urls import data_url_payload

from . import formats, prompts, quantity
from .base import ApiModel, cel
from .formats import Rule, pattern_rule

GROUP = "swerollout.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SWERollout"
PLURAL = "swerollouts"
SINGULAR = "swerollout"
SHORT_NAMES = ["swer"]
# No category may equal a resource's name: with two kinds in a category named like the
# singular `swerollout`, `kubectl get swerollout NAME` fails ("you must specify only one resource").
CATEGORIES = ["rl"]
BATCH_KIND = "SWERolloutBatch"
BATCH_PLURAL = "swerolloutbatches"
BATCH_SINGULAR = "swerolloutbatch"
BATCH_SHORT_NAMES = ["swerb"]

# Labels the operator and the client put on objects.
LABEL_BATCH = "swerollout.io/batch"
LABEL_MEMBER = "swerollout.io/member"
LABEL_SAMPLE = "swerollout.io/sample"
LABEL_GROUP_SIZE = "swerollout.io/group-size"
"""Members of the rollout's GRPO group (same batch and sample), set by the client's submit_batch:
with a Kueue queue the group's pods form one pod group of this many (admitted whole)."""
LABEL_ROLLOUT = "swerollout.io/rollout"
LABEL_COMPONENT = "swerollout.io/component"
# On a rollout/eval pod: a short hash of its task image, so pods of one image prefer the
# nodes that run one already (and hold the image: one pull per node, not per pod).
LABEL_IMAGE = "swerollout.io/image"
# On a rollout/eval pod: the host:port addresses (comma-separated) its runner must
# reach (the ingest API, the policy server); the embedded node agent links exactly these.
ANNOTATION_EGRESS = "swerollout.io/egress"
FINALIZER = "swerollout.io/cleanup"

KiB = 1024
MiB = 1024 * KiB

Name = Annotated[str, StringConstraints(min_length=1, max_length=253)]
ShortText = Annotated[str, StringConstraints(max_length=1024)]
TestName = Annotated[str, StringConstraints(min_length=1, max_length=2048)]
Template = Annotated[str, StringConstraints(max_length=16 * KiB)]
MESSAGE_LIMIT = 32 * KiB
"""Characters in status.message and a condition's message (metav1.Condition's bound)."""
Message = Annotated[str, StringConstraints(max_length=MESSAGE_LIMIT)]
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
"""A condition's reason, as Kubernetes' metav1.Condition has it (CamelCase, no spaces)."""
Reason = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=REASON_PATTERN)]

WeightVersion = Annotated[str, StringConstraints(max_length=128)]

INSTANCE_TEXT_LIMIT = 512 * KiB
"""Characters that problemStatement, issueImages and the evaluation's texts and test ids
may hold together. With every other field (status included) at its bound the whole object
stays under 1 MiB, well below etcd's 1.5 MiB request limit (tests/api check it)."""
SERVER_SIDE_HINT = (
    "objects over 256 KiB need `kubectl apply --server-side` (or `kubectl create`): "
    "client-side apply copies the whole object into an annotation limited to 256 KiB"
)


class _IntOrStringQuantity:
    """A core/v1 quantity: an integer (`cpu: 2`) or a string (`500m`, `1.5Gi`), never negative."""

    _message = "must be a non-negative quantity such as 2, 500m, 1.5Gi or 1e3"

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        def validate(value: Any) -> int | str:
            if not quantity.is_quantity(value):
                raise ValueError(f"{value!r} {self._message}")
            return value  # type: ignore[no-any-return]

        return core_schema.no_info_plain_validator_function(validate)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        rule = f"type(self) == int ? self >= 0 : self.matches({formats.cel_string(quantity.PATTERN)})"
        return {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "maxLength": 64,
            "x-kubernetes-validations": [cel(rule, self._message)],
        }


Quantity = Annotated[int | str, _IntOrStringQuantity()]
_RESOURCE_NAME_CEL = (
    "self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'] "
    f"|| (k.startsWith('hugepages-') && k.substring(10).matches({formats.cel_string(quantity.PATTERN)})) "
    f"|| (k.matches({formats.cel_string(quantity.EXTENDED_RESOURCE)}) && !k.split('/')[0].endsWith('kubernetes.io')))"
)
ResourceList = Annotated[
    dict[str, Quantity],
    Field(max_length=8),
    Rule(
        _RESOURCE_NAME_CEL,
        "resource names are cpu, memory, ephemeral-storage, hugepages-<size> or a domain-qualified extended "
        "resource such as nvidia.com/gpu",
        lambda v: all(quantity.is_resource_name(k) for k in v),
    ),
]
DnsSubdomain = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253),
    pattern_rule(formats.DNS_SUBDOMAIN, "must be a lowercase RFC 1123 name (a-z, 0-9, '-', '.'), e.g. my-secret"),
]
LabelKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=317),
    pattern_rule(
        formats.LABEL_KEY,
        "must be a label key: an optional DNS prefix and '/', then at most 63 characters of "
        "a-z, A-Z, 0-9, '-', '_', '.', starting and ending alphanumeric (e.g. example.com/gpu-type)",
    ),
]
LabelValue = Annotated[
    str,
    StringConstraints(max_length=63),
    pattern_rule(
        formats.LABEL_VALUE,
        "must be a label value: at most 63 characters of a-z, A-Z, 0-9, '-', '_', '.', starting and ending alphanumeric",
    ),
]
QueueName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=63),
    pattern_rule(
        formats.DNS_SUBDOMAIN,
        "must be a Kueue LocalQueue name: at most 63 lowercase characters a-z, 0-9, '-', '.', e.g. team-a",
    ),
]
HttpUrl = Annotated[
    str,
    StringConstraints(min_length=1, max_length=2048),
    pattern_rule(
        formats.HTTP_URL,
        "must be an http(s) URL with a host and an optional port from 1 to 65535, e.g. http://sglang:30000",
    ),
]


class Phase(str, Enum):
    """Where a rollout is in its life. The transitions live in the operator's phase machine."""

    PENDING = "Pending"
    QUEUED = "Queued"
    """Waiting for capacity: a ResourceQuota refuses the pod, no node can take it, or Kueue has not admitted it."""
    STARTING = "Starting"
    PREPARED = "Prepared"
    """Suspended before its first run: the pod and sandbox are up and the runner holds the
    first prompt; a resume sends the first /generate at once (the Prepared condition says
    whether the runner is done preparing, or the pod was released)."""
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


class OnAbort(str, Enum):
    """What an aborted generate request leaves in the token list (spec.inference.onAbort)."""

    DROP = "Drop"
    """Its tokens are dropped; the resumed turn is re-sampled from its start (every turn has one weight version)."""
    KEEP = "Keep"
    """Its sampled tokens that carry logprobs stay, each with the version that sampled it; the resumed request continues from them (partial rollout, as slime and AReaL do)."""


class IssueImageMode(str, Enum):
    INLINE = "Inline"
    """The images go to the model as images, in order, before the task text; a chat template that cannot show images fails the rollout (InvalidSpec) instead of dropping them."""
    LINKS = "Links"
    """Text fallback: the model sees no image; the problem statement ends with a numbered list of the image URLs (inline data is described by type and size)."""


class ToolName(str, Enum):
    BASH = "bash"
    STR_REPLACE_EDITOR = "str_replace_editor"
    SUBMIT = "submit"


class LogParser(str, Enum):
    """How test output is read into per-test results: SWE-bench's parser names (``parse_log_<value>``).

    The runner grades with swebench's own parser when the eval extra is installed; without it only
    the pytest family is built in. Published datasets name any of these in their rows."""

    ANT = "ant"
    ASTROID = "astroid"
    ASTROPY = "astropy"
    BPMN_JS = "bpmn_js"
    CALYPSO = "calypso"
    CARBON = "carbon"
    CARGO = "cargo"
    CHART_JS = "chart_js"
    CUCUMBER = "cucumber"
    DJANGO = "django"
    DOCTEST = "doctest"
    ESLINT = "eslint"
    FLASK = "flask"
    GOOGLETEST = "googletest"
    GOTEST = "gotest"
    GRADLE_CUSTOM = "gradle_custom"
    GROMMET = "grommet"
    HIGHLIGHTJS = "highlightjs"
    IMMUTABLE_JS = "immutable_js"
    JEKYLL = "jekyll"
    JEST = "jest"
    JEST_JSON = "jest_json"
    JQ = "jq"
    KARMA = "karma"
    LIGHTHOUSE = "lighthouse"
    MARKED = "marked"
    MARSHMALLOW = "marshmallow"
    MATPLOTLIB = "matplotlib"
    MAVEN = "maven"
    MICROPYTHON_TEST = "micropython_test"
    MINITEST = "minitest"
    NEXT = "next"
    OPENLAYERS = "openlayers"
    P5JS = "p5js"
    PHPUNIT = "phpunit"
    PRISMJS = "prismjs"
    PVLIB = "pvlib"
    PYDICOM = "pydicom"
    PYLINT = "pylint"
    PYTEST = "pytest"
    PYTEST_OPTIONS = "pytest_options"
    PYTEST_V2 = "pytest_v2"
    PYVISTA = "pyvista"
    QUARTO_CLI = "quarto_cli"
    REACT_PDF = "react_pdf"
    REDIS = "redis"
    REQUESTS = "requests"
    RSPEC_TRANSFORMED_JSON = "rspec_transformed_json"
    RUBY_UNIT = "ruby_unit"
    SCIKIT = "scikit"
    SEABORN = "seaborn"
    SPHINX = "sphinx"
    SQLFLUFF = "sqlfluff"
    SYMPY = "sympy"
    TAP = "tap"
    VITEST = "vitest"
    XARRAY = "xarray"


class EvalType(str, Enum):
    """SWE-bench's grading rule: both FAIL_TO_PASS and PASS_TO_PASS, or FAIL_TO_PASS only."""

    PASS_AND_FAIL = "pass_and_fail"
    FAIL_ONLY = "fail_only"


class Evaluation(ApiModel):
    """How the reward is computed for this instance (SWE-bench fields)."""

    fail_to_pass: list[TestName] = Field(default_factory=list, max_length=4096)
    """Tests that fail before the gold patch and must pass after the candidate patch, as the log parser names them (e.g. `tests/test_x.py::test_y[two words]`); matched exactly."""
    pass_to_pass: list[TestName] = Field(default_factory=list, max_length=16384)
    """Tests that pass before and must still pass after the candidate patch; matched exactly."""
    test_patch: Annotated[str, StringConstraints(max_length=256 * KiB)] = ""
    """Unified diff that adds or updates the tests; applied in the eval pod after the candidate patch."""
    eval_script: Annotated[str, StringConstraints(max_length=128 * KiB)] = ""
    """Bash script run in the eval pod's fresh sandbox after the patches are applied. It prints SWE-bench's start/end test-output markers around the test run. Empty: run `pytest -rA` on the tests named in failToPass and passToPass."""
    log_parser: LogParser = LogParser.PYTEST
    """Parser that turns the eval script's output into per-test statuses."""
    eval_type: EvalType = EvalType.PASS_AND_FAIL
    """Whether passToPass counts toward `resolved`."""


_INSTANCE_TEXT_CEL = (
    "self.problemStatement.size()"
    " + (has(self.issueImages) ? self.issueImages.map(u, u.size()).sum() : 0)"
    " + (has(self.evaluation) ? ("
    "(has(self.evaluation.testPatch) ? self.evaluation.testPatch.size() : 0)"
    " + (has(self.evaluation.evalScript) ? self.evaluation.evalScript.size() : 0)"
    " + (has(self.evaluation.failToPass) ? self.evaluation.failToPass.map(t, t.size()).sum() : 0)"
    " + (has(self.evaluation.passToPass) ? self.evaluation.passToPass.map(t, t.size()).sum() : 0)"
    ") : 0)"
    f" <= {INSTANCE_TEXT_LIMIT}"
)
_INSTANCE_TEXT_MESSAGE = (
    f"problemStatement, issueImages, testPatch, evalScript, failToPass and passToPass may hold at most "
    f"{INSTANCE_TEXT_LIMIT // KiB} KiB together; shorten them (and note: {SERVER_SIDE_HINT})"
)


def _decodable_image(url: str) -> str:
    if url.startswith("data:"):
        data_url_payload(url)  # raises IssueImageError, a ValueError naming the problem
    return url


IssueImage = Annotated[
    str,
    StringConstraints(min_length=1, max_length=256 * KiB),
    # A regex over 256 KiB exceeds the API server's CEL cost budget, so the URL is
    # read with CEL's url library (Go's url.ParseRequestURI); formats.is_http_url agrees.
    Rule(
        "self.startsWith('data:image/') || ((self.startsWith('http://') || self.startsWith('https://'))"
        " && isURL(self) && url(self).getHostname() != ''"
        " && (url(self).getPort() == '' || (int(url(self).getPort()) >= 1 && int(url(self).getPort()) <= 65535)))",
        "must be an http(s) URL with a host, or a data URL such as data:image/png;base64,...",
        lambda v: v.startswith("data:image/") or formats.is_http_url(v),
    ),
    # CEL cannot decode base64: the model checks a data URL's type and payload (InvalidSpec).
    AfterValidator(_decodable_image),
]


class Instance(ApiModel):
    """The SWE-bench style task. Immutable: a different task is a different SWERollout.

    Its texts may hold 512 KiB together; objects over 256 KiB need `kubectl apply --server-side`
    (client-side apply copies the object into an annotation limited to 256 KiB)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel("self == oldSelf", "spec.instance is immutable; create a new SWERollout for another task"),
                cel(_INSTANCE_TEXT_CEL, _INSTANCE_TEXT_MESSAGE),
            ]
        }
    }

    instance_id: Annotated[
        str, StringConstraints(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/+-]*$")
    ]
    """SWE-bench instance id, e.g. `astropy__astropy-12907`."""
    repo: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    """Repository the task comes from, e.g. `astropy/astropy`."""
    base_commit: Annotated[str, StringConstraints(min_length=7, max_length=64, pattern=r"^[0-9a-f]{7,64}$")]
    """Commit the sandbox is checked out at (hex)."""
    image: Annotated[
        str,
        StringConstraints(min_length=1, max_length=1024),
        pattern_rule(
            formats.IMAGE,
            "must be an image reference such as registry.example/org/name:tag (lowercase path, no spaces), "
            "or file:///<git repository> in dev mode",
        ),
    ]
    """Container image of the sandbox with the repository at `workdir`. In the embedded dev mode, `file://<absolute path of a git repository>` gives a fresh checkout of that repository at baseCommit."""
    problem_statement: Annotated[str, StringConstraints(min_length=1, max_length=256 * KiB)]
    """The issue text shown to the agent. At 256 KiB, apply with `kubectl apply --server-side`."""
    issue_images: list[IssueImage] = Field(default_factory=list, max_length=16)
    """Images attached to the issue (multimodal tasks): http(s) URLs or base64 `data:image/...` URLs."""
    workdir: Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=r"^/")] = "/testbed"
    """Absolute path of the repository inside the sandbox."""
    evaluation: Evaluation = Field(default_factory=Evaluation)
    """How the reward is computed."""

    @model_validator(mode="after")
    def _text_budget(self) -> Instance:
        ev = self.evaluation
        total = (
            len(self.problem_statement)
            + sum(map(len, self.issue_images))
            + len(ev.test_patch)
            + len(ev.eval_script)
            + sum(map(len, ev.fail_to_pass))
            + sum(map(len, ev.pass_to_pass))
        )
        if total > INSTANCE_TEXT_LIMIT:
            raise ValueError(f"{_INSTANCE_TEXT_MESSAGE} (got {total // KiB} KiB)")
        return self


class Templates(ApiModel):
    """Jinja prompt templates, SWE-agent style; unset ones use the built-in ones of the agent kind.

    Every template sees `problem_statement`, `working_dir`, `repo`, `instance_id` and
    `base_commit`, plus its own variables below; any other variable, or a Jinja syntax
    error, is refused when the spec is validated (client, operator and runner alike)."""

    system_template: Template | None = None
    """System message."""
    instance_template: Template | None = None
    """First user message: the task."""
    next_step_template: Template | None = None
    """Wraps each observation; sees `observation`, `exit_code`."""
    next_step_no_output_template: Template | None = None
    """Used when a command printed nothing; sees `exit_code`."""
    truncated_observation_template: Template | None = None
    """Used when an observation is longer than `maxObservationChars`; sees `observation` (the kept head), `elided_chars`, `max_observation_chars`."""
    format_error_template: Template | None = None
    """Sent back when the model's reply has no valid action; sees `error`."""
    blocklist_error_template: Template | None = None
    """Sent back (as a format error) for a blocked command; sees `action`."""
    command_timeout_template: Template | None = None
    """Observation of a command stopped by commandTimeoutSeconds; sees `command`, `timeout`."""

    @field_validator(*prompts.TEMPLATE_VARIABLES)
    @classmethod
    def _variables(cls, source: str | None, info: ValidationInfo) -> str | None:
        if source is not None:
            assert info.field_name is not None
            prompts.check_template(info.field_name, source)
        return source

    def resolved(self, action_format: prompts.ActionFormat) -> dict[str, str]:
        """Every template: the ones set here, the built-in ones of `action_format` elsewhere."""
        return {**prompts.BUILTIN_TEMPLATES[action_format], **self.model_dump(exclude_none=True)}


_SET: dict[str, Any] = {"x-kubernetes-list-type": "set"}


def _no_duplicates(model: ApiModel, *fields: str) -> None:
    """Lists the API server keeps as sets (`x-kubernetes-list-type: set`) refuse duplicates."""
    for name in fields:
        values = getattr(model, name)
        seen = [v for i, v in enumerate(values) if v in values[:i]]
        if seen:
            alias = type(model).model_fields[name].alias or name
            shown = seen[0].value if isinstance(seen[0], Enum) else seen[0]
            raise ValueError(f"{alias}: duplicate entry {shown!r}; list each value once")


_SUBMIT_MESSAGE = "enabled must include submit, or the agent can never finish"


class Tools(ApiModel):
    """The tools the agent may call."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [cel("'submit' in self.enabled", _SUBMIT_MESSAGE, field_path=".enabled")]
        }
    }

    enabled: list[ToolName] = Field(
        default_factory=lambda: [ToolName.BASH, ToolName.STR_REPLACE_EDITOR, ToolName.SUBMIT],
        min_length=1,
        max_length=8,
        json_schema_extra=_SET,
    )
    """Tools offered to the model (function calling); TextBashAgent always uses bash and submit."""
    blocklist: list[Annotated[str, StringConstraints(min_length=1, max_length=256)]] = Field(
        default_factory=lambda: list(prompts.DEFAULT_BLOCKLIST),
        max_length=64,
        json_schema_extra=_SET,
    )
    """Commands refused without running them: a command that is one of these, or starts with one followed by a space (interactive or session-breaking programs)."""
    blocklist_standalone: list[Annotated[str, StringConstraints(min_length=1, max_length=256)]] = Field(
        default_factory=lambda: list(prompts.DEFAULT_BLOCKLIST_STANDALONE),
        max_length=64,
        json_schema_extra=_SET,
    )
    """Commands refused only when run bare, e.g. `python` (a REPL) but not `python -c ...`."""
    env: Annotated[
        dict[str, Annotated[str, StringConstraints(max_length=512)]],
        Field(max_length=32),
        Rule(
            f"self.all(k, k.size() <= 128 && k.matches({formats.cel_string(formats.ENV_NAME)}))",
            "keys must be shell variable names (letters, digits, '_', not starting with a digit; at most 128)",
            lambda v: all(len(k) <= 128 and formats.matches(k, formats.ENV_NAME) for k in v),
        ),
    ] = Field(default_factory=lambda: dict(prompts.DEFAULT_SHELL_ENV))
    """Exported in the agent's shell before the first command (pagers and progress bars off)."""
    max_observation_chars: int = Field(default=10_000, ge=100, le=1_000_000)
    """Observations longer than this are truncated (characters)."""

    @model_validator(mode="after")
    def _sets(self) -> Tools:
        _no_duplicates(self, "enabled", "blocklist", "blocklist_standalone")
        if ToolName.SUBMIT not in self.enabled:
            raise ValueError(_SUBMIT_MESSAGE)
        return self


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
    max_consecutive_timeouts: int = Field(default=3, ge=1, le=100)
    """This many command timeouts in a row end the run with `exit_command_timeout` (SWE-agent's default is 3)."""
    issue_image_mode: IssueImageMode = IssueImageMode.INLINE
    """How `spec.instance.issueImages` reach the model: `Inline` as images (the tokenizer's chat template must show images), or `Links` as a text list after the problem statement."""

    @property
    def action_format(self) -> prompts.ActionFormat:
        """How the model's actions are read: one fenced bash block for TextBashAgent, tool calls otherwise."""
        if self.kind == AgentKind.TEXT_BASH_AGENT:
            return prompts.ActionFormat.TEXT_BASH
        return prompts.ActionFormat.FUNCTION_CALLING


class Sampling(ApiModel):
    """Sampling parameters sent with every generate request."""

    temperature: float = Field(default=1.0, ge=0.0, le=10.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: Annotated[
        int,
        Field(le=1_000_000),
        Rule(
            "self == -1 || self >= 1",
            "must be -1 (top-k off) or at least 1, as SGLang accepts",
            lambda v: v == -1 or v >= 1,
        ),
    ] = -1
    """Sample from the k most likely tokens; -1 disables top-k (0 is refused, as SGLang refuses it)."""
    max_new_tokens: int = Field(default=4096, ge=1, le=1_048_576)
    """Upper bound of tokens per model turn; the context budget may lower it."""
    seed: int | None = Field(default=None, ge=0)
    """Sampling seed, for reproducible runs on servers that honour it."""
    stop: list[Annotated[str, StringConstraints(min_length=1, max_length=256)]] = Field(
        default_factory=list, max_length=16
    )
    """Extra stop strings."""


SecretKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=253),
    pattern_rule(formats.SECRET_KEY, "must be a Secret key: a-z, A-Z, 0-9, '-', '_', '.' (e.g. api-key)"),
]


class SecretKeyRef(ApiModel):
    """One key of a Secret in the rollout's namespace (core/v1 SecretKeySelector)."""

    name: DnsSubdomain
    """The Secret's name."""
    key: SecretKey
    """The key in the Secret's data whose value is used."""


class Inference(ApiModel):
    """The policy server."""

    endpoint: HttpUrl
    """Base URL of the SGLang server (RLTokenAgent, TextBashAgent) or of an OpenAI-compatible server (ChatAgent)."""
    tokenizer: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = None
    """Tokenizer whose chat template renders the conversation: a bundled name (e.g. `qwen-2.5`, `qwen-3`, `glm-4`, `deepseek-v3`) or a directory path. Required unless the agent is a ChatAgent."""
    model: Annotated[str, StringConstraints(max_length=256)] | None = None
    """Model name sent to OpenAI-compatible servers (ChatAgent)."""
    sampling: Sampling = Field(default_factory=Sampling)
    """Sampling parameters."""
    max_context_tokens: int = Field(default=32768, ge=256, le=4_194_304)
    """Prompt plus generated tokens may not exceed this; reaching it ends the run with `exit_context`. Counts tokens generated before an abort."""
    max_sampled_tokens: int | None = Field(default=None, ge=1, le=1_073_741_824)
    """Tokens the policy may sample in this rollout across all attempts, those dropped by aborts included; reaching it ends the run with `exit_context` and a message naming this field. Unset: no limit beyond maxContextTokens."""
    weight_version: WeightVersion | None = None
    """Weight version the trainer expects; recorded per token when the server reports none. The rollout's SWERolloutBatch overrides it when that sets `spec.weightVersion`."""
    request_timeout_seconds: int = Field(default=600, ge=1, le=86400)
    """Timeout of one generate request (seconds)."""
    outage_budget_seconds: int = Field(default=600, ge=0, le=86400)
    """How long the runner waits out an inference server that is unreachable, answers 5xx or 429, or keeps aborting this run's requests (a restart, a weight update), counted from the first failure of an unbroken series. The turn is re-sent once the server is back; past the budget the run ends `exit_api` and the rollout fails naming the cause. 0: give up after the client's few quick retries."""
    return_routed_experts: bool = False
    """Ask SGLang for MoE routing decisions and keep them in the trajectory."""
    api_key_secret_ref: SecretKeyRef | None = None
    """The server's API key (SGLang's `--api-key`, an OpenAI-compatible server's key), sent as `Authorization: Bearer` on every request but aborts when an admin key is set. Mounted into the runner container only (never the sandbox); the kubelet reads the Secret, the operator does not. Unset: no key is sent."""
    admin_key_secret_ref: SecretKeyRef | None = None
    """The server's admin key (SGLang's `--admin-api-key`), sent as `Authorization: Bearer` on the runner's `/abort_request`. Mounted like apiKeySecretRef. Unset: aborts carry the API key (SGLang's rule when no admin key is set); a server that still refuses an abort has the request's connection closed instead, which SGLang treats as an abort."""
    on_abort: OnAbort = OnAbort.DROP
    """What an aborted request (a suspension, or a trainer's abort/pause around a weight update) leaves behind: `Drop` discards its tokens and re-samples the turn; `Keep` keeps the tokens that have logprobs, each with the version that sampled it, and continues the turn from them. The trajectory's `info.mixed_version_turns` lists turns sampled by more than one version."""


class Toleration(ApiModel):
    """A pod toleration (core/v1 Toleration, validated as core/v1 does)."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel(
                    "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
                    "operator Exists matches every value: remove value, or use operator Equal",
                ),
                cel(
                    "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
                    "a toleration without a key must use operator Exists (it then tolerates every taint)",
                ),
                cel(
                    "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                    "tolerationSeconds applies only to effect NoExecute",
                ),
            ]
        }
    }

    key: LabelKey | None = None
    """Taint key to match; empty (with operator Exists) matches every key."""
    operator: Literal["Exists", "Equal"] | None = None
    """Equal (the default) matches key and value; Exists matches any value of the key."""
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None
    """How long a NoExecute taint is tolerated before eviction (seconds)."""

    @model_validator(mode="after")
    def _as_core_v1(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists matches every value: remove value, or use operator Equal")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without a key must use operator Exists (it then tolerates every taint)")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds applies only to effect NoExecute")
        return self


_REQUESTS_WITHIN_LIMITS = (
    "!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits)"
    " || !isQuantity(string(self.requests[k])) || !isQuantity(string(self.limits[k]))"
    " || quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) <= 0)"
)


class Resources(ApiModel):
    """Resources of a container (core/v1 quantities: `2`, `500m`, `2Gi`); each request at most its limit."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel(
                    _REQUESTS_WITHIN_LIMITS,
                    "a request is above its limit: each requests.<name> must be at most limits.<name>",
                )
            ]
        }
    }

    requests: ResourceList = Field(default_factory=dict)
    """Guaranteed amounts (scheduling); keys cpu, memory, ephemeral-storage, hugepages-<size> or extended resources."""
    limits: ResourceList = Field(default_factory=dict)
    """Upper bounds; a request may not exceed its limit."""

    @model_validator(mode="after")
    def _requests_within_limits(self) -> Resources:
        for name, request in self.requests.items():
            if name in self.limits and quantity.parse(request) > quantity.parse(self.limits[name]):
                raise ValueError(
                    f"requests.{name} ({request}) is above limits.{name} ({self.limits[name]}): "
                    "each requests.<name> must be at most limits.<name>"
                )
        return self


class SandboxSpec(ApiModel):
    """Where and how the rollout pod runs."""

    resources: Resources = Field(
        default_factory=lambda: Resources(requests={"cpu": "500m", "memory": "1Gi"}, limits={"memory": "4Gi"})
    )
    """Resources of the sandbox container."""
    node_selector: Annotated[
        dict[str, LabelValue],
        Field(max_length=32),
        Rule(
            f"self.all(k, k.size() <= 317 && k.matches({formats.cel_string(formats.LABEL_KEY)}))",
            "keys must be label keys: an optional DNS prefix and '/', then at most 63 characters of "
            "a-z, A-Z, 0-9, '-', '_', '.', starting and ending alphanumeric (e.g. example.com/gpu-type)",
            lambda v: all(len(k) <= 317 and formats.matches(k, formats.LABEL_KEY) for k in v),
        ),
    ] = Field(default_factory=dict)
    """Pod nodeSelector (label keys and values, as core/v1 validates them)."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Pod tolerations."""
    runtime_class_name: DnsSubdomain | None = None
    """RuntimeClass for stronger isolation (e.g. gVisor, Kata)."""
    image_pull_secrets: list[DnsSubdomain] = Field(default_factory=list, max_length=8, json_schema_extra=_SET)
    """Names of Secrets in the namespace used to pull the task image."""
    startup_timeout_seconds: int = Field(default=600, ge=10, le=86400)
    """How long the pod may take to become ready before the rollout fails with the reason (image pull, init container). Time spent Queued (waiting for quota, a node or Kueue's admission) does not count."""
    queue_timeout_seconds: int | None = Field(default=None, ge=10, le=30 * 86400)
    """How long the rollout may wait Queued for capacity, over all its waits, before it fails with reason QueueTimeout. Unset (the default): no limit."""
    queue_name: QueueName | None = None
    """Kueue LocalQueue the rollout's pods join (label `kueue.x-k8s.io/queue-name`); the members of one GRPO group (batch and sample) form one pod group, admitted whole or not at all. Unset: the operator's `--default-queue-name` (chart value `operator.queueName`), or no Kueue."""
    keep_alive_seconds_after_abort: int = Field(default=1800, ge=0, le=7 * 86400)
    """How long an aborted rollout keeps its live pod for a resume on the same sandbox; after that the pod is reclaimed."""
    prepared_timeout_seconds: int = Field(default=1800, ge=0, le=7 * 86400)
    """How long a Prepared rollout (created suspended, never run) holds its ready pod, counted from when it became Prepared; after that the pod is released and a resume starts the rollout in a fresh pod (seconds, default 1800: one trainer step)."""
    max_attempts: int = Field(default=5, ge=1, le=20)
    """Rollout pods a rollout may use: a pod or node lost mid-run, or a run the infrastructure ended with nothing graded (`exit_api`, `exit_environment_error`), is replayed from its last per-turn checkpoint into a fresh pod while attempts remain; then the rollout fails with the cause. Eval pods that fail for infrastructure reasons are re-run within the same bound. The policy's own outcomes are never retried."""

    @model_validator(mode="after")
    def _sets(self) -> SandboxSpec:
        _no_duplicates(self, "image_pull_secrets")
        return self


class Reward(ApiModel):
    """Reward evaluation in a separate, clean pod."""

    enabled: bool = True
    """Run the eval pod after the rollout; false leaves `status.reward` unset."""
    timeout_seconds: int = Field(default=1800, ge=10, le=86400)
    """Limit for the whole evaluation (seconds)."""
    resources: Resources | None = None
    """Resources of the eval sandbox; defaults to the rollout sandbox's."""
    prewarm: bool = False
    """Start the eval pod while the rollout is prepared or runs, so it waits ready for the patch (fresh, used for nothing else, its grading code already loaded) and the reward follows the runner's finish by the tests' own time; costs a second pod per prepared or running rollout. Default false: see docs/architecture.md, "Warm starts", for the measured trade."""


_GRADABLE = (
    "!has(self.reward) || !has(self.reward.enabled) || !self.reward.enabled"
    " || (has(self.instance.evaluation) && ("
    "(has(self.instance.evaluation.failToPass) && size(self.instance.evaluation.failToPass) > 0)"
    " || (has(self.instance.evaluation.passToPass) && size(self.instance.evaluation.passToPass) > 0)))"
)
_TOKENIZER_MESSAGE = (
    "spec.inference.tokenizer is required for token-tracking agents (RLTokenAgent, TextBashAgent); "
    "set it to a bundled name such as qwen-2.5 or use agent.kind ChatAgent"
)
_GRADABLE_MESSAGE = (
    "spec.reward.enabled needs tests to grade: set spec.instance.evaluation.failToPass (or passToPass), "
    "or set spec.reward.enabled to false"
)


class SWERolloutSpec(ApiModel):
    """Desired state of one rollout."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel(
                    "self.agent.kind == 'ChatAgent' || has(self.inference.tokenizer)",
                    _TOKENIZER_MESSAGE,
                    field_path=".inference.tokenizer",
                ),
                cel(
                    "self.mode == oldSelf.mode",
                    "spec.mode is immutable",
                    field_path=".mode",
                ),
                cel(_GRADABLE, _GRADABLE_MESSAGE, field_path=".reward.enabled"),
            ]
        }
    }

    instance: Instance
    """The task. Immutable."""
    inference: Inference
    """The policy server."""
    agent: Agent = Field(default_factory=Agent)
    """The agent loop and its limits."""
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec)
    """Pod placement, resources and lifetime."""
    reward: Reward = Field(default_factory=Reward)
    """Reward evaluation."""
    mode: Mode = Mode.TRAIN
    """train or validate; decides which exit statuses are graded. Immutable."""
    suspend: bool = Field(default=False, strict=True)
    """true aborts a running rollout at once and keeps its pod alive (up to keepAliveSecondsAfterAbort); false again resumes it on the same pod. Written only by users. The rollout is also suspended while its SWERolloutBatch (named by the `swerollout.io/batch` label) has `spec.suspend: true`."""

    @model_validator(mode="after")
    def _gradable(self) -> SWERolloutSpec:
        if self.agent.kind != AgentKind.CHAT_AGENT and not self.inference.tokenizer:
            raise ValueError(_TOKENIZER_MESSAGE)
        ev = self.instance.evaluation
        if self.reward.enabled and not (ev.fail_to_pass or ev.pass_to_pass):
            raise ValueError(_GRADABLE_MESSAGE)
        return self


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
    PREPARED = "Prepared"
    """Set while the rollout is Prepared: True (reason Prepared) once its runner holds the first prompt, ready to send it; False while it prepares (Preparing) or after its pod was released (Released)."""


class Condition(ApiModel):
    """A metav1.Condition."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=316)]
    status: ConditionStatus
    observed_generation: int | None = Field(default=None, ge=0)
    last_transition_time: datetime
    reason: Reason
    message: Message = ""


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


class ContainerLogs(ApiModel):
    """The runner containers' own logs, kept in the result store (the last 1 MiB of each),
    so they outlive the pods; `swerollout logs` reads them once the pods are gone."""

    runner: ObjectRef | None = None
    """The rollout pod's runner, as of its latest report (finish, abort, failure)."""
    eval: ObjectRef | None = None
    """The eval pod's runner, as of its report."""


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


class Checkpoint(ApiModel):
    """The newest per-turn checkpoint the operator knows of: the head of a chain of segments in the result store (each holds only what its turn added), from which a lost pod is replayed. Coalesced with `progress`: it may trail the runner by a few seconds, and a replay then re-samples those turns."""

    snapshot: ObjectRef
    """The chain's head segment."""
    attempt: int = Field(ge=1)
    """The attempt (pod) that wrote it."""
    segments: int = Field(ge=1)
    """Segments a restore reads (a whole one, then one per turn)."""
    bytes: int = Field(ge=0)
    """Bytes of those segments."""
    turns: int = Field(ge=0)
    tokens: int = Field(ge=0)
    """Tokens in the context at the boundary (prompt and generated)."""
    sampled_tokens: int = Field(default=0, ge=0)
    """Tokens sampled up to the boundary, dropped ones included."""


class Retry(ApiModel):
    """One attempt the infrastructure lost, and what was done about it."""

    attempt: int = Field(ge=1)
    """The attempt that was lost."""
    reason: ShortText
    """`PodLost` (pod or node gone mid-run), `InferenceFailed` (`exit_api`), `SandboxFailed` (`exit_environment_error`), `EvalPodFailed`."""
    turns: int = Field(default=0, ge=0)
    """Turns of the checkpoint the replay starts from (0: from the beginning)."""
    at: datetime


class Progress(ApiModel):
    """Coalesced progress (at most one update every few seconds)."""

    turns: int = Field(default=0, ge=0)
    tokens: int = Field(default=0, ge=0)
    """Tokens in the context (prompt and generated)."""
    generated_tokens: int = Field(default=0, ge=0)
    """Tokens sampled by the policy so far."""
    inference_aborts: int = Field(default=0, ge=0)
    """Aborts from the inference side (a trainer's pause_generation or abort_request) that the run rode out: it waited for the server and re-sampled the turn. Not a suspension; only `spec.suspend` suspends."""
    updated_at: datetime | None = None


class Result(ApiModel):
    """The finished trajectory."""

    exit_status: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    """SWE-agent exit status: submitted, exit_context, exit_format, exit_command_timeout, exit_total_execution_time, exit_max_iter_out, exit_environment_error, exit_api, exit_error; an error exit whose working-tree diff was recovered and submitted reads `submitted (exit_...)`."""
    turns: int = Field(ge=0)
    prompt_tokens: int = Field(ge=0)
    response_tokens: int = Field(ge=0)
    sampled_tokens: int = Field(default=0, ge=0)
    """Tokens the policy sampled that the trajectory keeps (loss mask 1), those kept across aborts (`onAbort: Keep`) included."""
    dropped_tokens: int = Field(default=0, ge=0)
    """Tokens the policy sampled in aborted requests that were dropped (`onAbort: Drop`, or without a logprob); with `sampledTokens` they add up to what `maxSampledTokens` counts."""
    truncated: bool = False
    """True when the run ended on the context limit."""
    has_patch: bool = False
    trajectory: ObjectRef | None = None
    """The token-exact trajectory (swerollout.wire.trajectory encoding)."""
    patch: ObjectRef | None = None
    """The submission patch, as the eval pod receives it."""
    finished_at: datetime | None = None
    """When the operator received the runner's finished report (milliseconds kept); with `reward.gradedAt`, the runner's finish -> reward."""


class PreparedState(ApiModel):
    """A rollout that was suspended before its first run (phase Prepared)."""

    since: datetime
    """When it became Prepared (its pod ready); preparedTimeoutSeconds count from here."""
    prepared_at: datetime | None = None
    """When its runner reported it holds the first prompt's tokens."""
    prompt_tokens: int | None = Field(default=None, ge=0)
    """Tokens of the first prompt, as the runner built them."""
    released_at: datetime | None = None
    """When its pod was released (preparedTimeoutSeconds, or the pod was lost); a resume starts a fresh pod."""
    restarted_at: datetime | None = None
    """When a resume after the release started the fresh pod (its startup deadline counts from here)."""


class EvaluationState(ApiModel):
    """The eval pod of a finished rollout."""

    attempt: int = Field(default=1, ge=1)
    pod_name: Name | None = None
    started_at: datetime | None = None


class QueueReason(str, Enum):
    """Why a rollout is Queued (status.queue.reason, and the reason of its SandboxReady condition)."""

    QUOTA_EXCEEDED = "QuotaExceeded"
    """Set when the API server refuses the pod for a ResourceQuota of the namespace (403 exceeded quota)."""
    UNSCHEDULABLE = "Unschedulable"
    """Set when the scheduler finds no node for the pod (PodScheduled=False, reason Unschedulable)."""
    AWAITING_ADMISSION = "AwaitingAdmission"
    """Set when the pod is held by a scheduling gate, Kueue's until its workload is admitted."""


class QueueState(ApiModel):
    """Waiting for capacity. The time spent Queued does not count against startupTimeoutSeconds; queueTimeoutSeconds bounds it."""

    reason: QueueReason | None = None
    """Why the rollout waits now; unset when it does not wait."""
    queued_at: datetime | None = None
    """When the current wait began; unset when it does not wait."""
    waited_seconds: int = Field(default=0, ge=0)
    """Seconds spent in waits that ended (the current one not included)."""


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
    tests_seconds: float | None = Field(default=None, ge=0)
    """Wall time of the eval script in the eval pod (the tests' own time), in seconds; unset when no test ran."""
    graded_at: datetime | None = None
    """When the operator received the eval pod's reward (milliseconds kept); unset when the evaluation was skipped."""


class SWERolloutStatus(ApiModel):
    """Observed state, written only by the operator."""

    phase: Phase = Phase.PENDING
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observed_generation: int | None = Field(default=None, ge=0)
    attempts: int = Field(default=0, ge=0)
    """Pods started for this rollout (a replay into a fresh pod adds one)."""
    replay: bool = False
    """The current pod replaced a lost one: the runner replays the recorded actions before resuming."""
    sandbox: SandboxHandle | None = None
    queue: QueueState | None = None
    progress: Progress | None = None
    checkpoint: Checkpoint | None = None
    retries: list[Retry] = Field(default_factory=list, max_length=32)
    """Attempts the infrastructure lost (a lost pod, an infrastructure exit, an eval pod that failed), oldest first."""
    partial: Partial | None = None
    result: Result | None = None
    prepared: PreparedState | None = None
    evaluation: EvaluationState | None = None
    reward: RewardStatus | None = None
    logs: ContainerLogs | None = None
    message: Message = ""
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
    def from_object(cls, obj: dict[str, Any]) -> SWERollout:
        """Parse an object as read from the API server (unknown status fields are an error)."""
        return cls.model_validate(obj)


class SWERolloutBatchSpec(ApiModel):
    """Desired state of a batch: what applies to every SWERollout labelled `swerollout.io/batch=<this object's name>`. Written only by users (the client's `abort(batch)` and `resume(batch)`); the operator only reads it."""

    suspend: bool = Field(default=False, strict=True)
    """true suspends every unfinished member at once, as if each had `spec.suspend: true` (a member is suspended while its own flag or its batch's is true); false again resumes the members whose own `spec.suspend` is false, on their pods."""
    weight_version: WeightVersion | None = None
    """Weight version the trainer expects from now on, for every member: overrides each member's `spec.inference.weightVersion` (recorded per token when the server reports none). Set it with the resume after a weight update."""


BATCH_NAME_RULE = cel(
    "self.metadata.name.size() <= 63",
    "a batch's name is its members' swerollout.io/batch label value: use at most 63 lowercase letters, digits "
    "and '-' (the client's batch names are at most 40)",
)
"""The batch object's name must be usable as a label value (checked by the API server)."""


class SWERolloutBatch(ApiModel):
    """A batch of SWERollouts (the members carry the label `swerollout.io/batch=<name>`): one object to suspend and resume them all with one write. Optional: a rollout whose batch has no such object follows its own `spec.suspend` alone."""

    api_version: Literal["swerollout.io/v1alpha1"] = API_VERSION  # type: ignore[assignment]
    kind: Literal["SWERolloutBatch"] = BATCH_KIND  # type: ignore[assignment]
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SWERolloutBatchSpec = Field(default_factory=SWERolloutBatchSpec)


# Who is suspended: the one rule, for the operator (what a runner is told, when an Aborted
# rollout resumes) and the client (what abort/resume must write), beside the two fields it
# reads. A rollout is suspended while its own `spec.suspend` OR its batch's is true. Both
# are written only by users, so the last write wins whatever order the writes and the
# runner's reports land in: the operator derives everything from the current values. A
# rollout with no batch object (or no batch label) follows its own flag alone, as before
# SWERolloutBatch existed.


def batch_name(labels: Mapping[str, str] | None) -> str | None:
    """The batch a rollout belongs to (its `swerollout.io/batch` label), if any."""
    return (labels or {}).get(LABEL_BATCH) or None


def is_suspended(own: bool, batch: SWERolloutBatchSpec | None) -> bool:
    return own or (batch is not None and batch.suspend)


def suspended_by(own: bool, batch: SWERolloutBatchSpec | None, batch_name: str | None = None) -> str:
    """Who suspends the rollout, for what users read (`swerollout list/get/watch`):
    'spec.suspend', 'batch <name>', both joined by ' and ', or '' when nobody does."""
    who = ["spec.suspend"] if own else []
    if batch is not None and batch.suspend:
        who.append(f"batch {batch_name}" if batch_name else "its SWERolloutBatch")
    return " and ".join(who)


def weight_version(own: str | None, batch: SWERolloutBatchSpec | None) -> str | None:
    """The weight version a run labels its tokens with where the server reports none:
    the batch's when it sets one (it is written with the resume after a weight update)."""
    if batch is not None and batch.weight_version:
        return batch.weight_version
    return own
