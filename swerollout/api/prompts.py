"""The agent's built-in prompt templates and the variables each template may use.

`spec.agent.templates` (v1alpha1.Templates) leaves a template unset to use the
built-in one for its agent kind, which lives here and nowhere else. Templates are
Jinja with StrictUndefined; `check_template` parses one and refuses unknown
variables, so a typo is refused when the spec is built (client), when the operator
reads it (InvalidSpec, before any pod) and when the runner loads it, the same way.
"""

from __future__ import annotations

from enum import Enum

import jinja2
import jinja2.meta

# The environment the runner renders with (agent_runner.agent.config); parsing here with
# the same settings means a template that passes here also compiles there.
JINJA = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)

TASK_VARIABLES = frozenset({"problem_statement", "working_dir", "repo", "instance_id", "base_commit"})
"""Variables every template sees (from spec.instance)."""

TEMPLATE_VARIABLES: dict[str, frozenset[str]] = {
    "system_template": frozenset(),
    "instance_template": frozenset(),
    "next_step_template": frozenset({"observation", "exit_code"}),
    "next_step_no_output_template": frozenset({"exit_code"}),
    "truncated_observation_template": frozenset({"observation", "elided_chars", "max_observation_chars"}),
    "format_error_template": frozenset({"error"}),
    "blocklist_error_template": frozenset({"action"}),
    "command_timeout_template": frozenset({"command", "timeout"}),
}
"""Each template's own variables, besides TASK_VARIABLES."""


class ActionFormat(str, Enum):
    FUNCTION_CALLING = "function_calling"
    """Tools as OpenAI function schemas; one tool call per turn (RLTokenAgent, ChatAgent)."""
    TEXT_BASH = "text_bash"
    """Exactly one ```bash fenced block per turn; `submit` is a bash command (TextBashAgent)."""


def check_template(name: str, source: str) -> None:
    """Raise ValueError naming the template when it does not parse or uses an unknown variable."""
    try:
        used = jinja2.meta.find_undeclared_variables(JINJA.parse(source))
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"{name}: Jinja syntax error on line {exc.lineno}: {exc.message}") from exc
    allowed = TEMPLATE_VARIABLES[name] | TASK_VARIABLES
    unknown = sorted(used - allowed)
    if unknown:
        raise ValueError(f"{name} uses unknown variable(s) {unknown}; available: {', '.join(sorted(allowed))}")


_INSTANCE = """\
The repository {{repo}} is checked out at {{working_dir}}.

<issue>
{{problem_statement}}
</issue>

Change the non-test source files under {{working_dir}} so that the issue is
resolved. Suggested approach:
1. Find and read the code the issue is about.
2. Reproduce the problem with a small script and run it.
3. Fix the source code.
4. Run your script again (and the existing tests) to confirm the fix.
5. """

_COMMON: dict[str, str] = {
    "next_step_template": (
        "OBSERVATION:\n{{observation}}\n"
        "{%- if exit_code is not none and exit_code != 0 %}\n(exit code {{exit_code}})\n{%- endif %}"
    ),
    "next_step_no_output_template": "The command finished with exit code {{exit_code}} and printed nothing.",
    "truncated_observation_template": (
        "OBSERVATION (cut to the first {{max_observation_chars}} characters; {{elided_chars}} more were not shown):\n"
        "{{observation}}\n"
        "<output clipped: use commands that print less, e.g. grep, head, tail, or view_range>"
    ),
    "blocklist_error_template": (
        "The command `{{action}}` is not available in this environment (interactive\n"
        "programs and session-breaking commands are refused). Use a different command."
    ),
    "command_timeout_template": (
        "The command `{{command}}` was stopped after {{timeout}} seconds without finishing.\n"
        "Commands cannot read keyboard input here; use commands that finish quickly\n"
        "(run long jobs in the background with output redirected to a file)."
    ),
}

BUILTIN_TEMPLATES: dict[ActionFormat, dict[str, str]] = {
    ActionFormat.FUNCTION_CALLING: {
        "system_template": (
            "You are a careful software engineer working in a Linux shell. You solve the\n"
            "task by calling the tools you are given, one tool call per reply. When the\n"
            "task is done, call `submit`."
        ),
        "instance_template": _INSTANCE + "Call `submit`.",
        "format_error_template": "Your reply could not be used: {{error}}\nReply again with exactly one tool call.",
        **_COMMON,
    },
    ActionFormat.TEXT_BASH: {
        "system_template": (
            "You are a careful software engineer working in a Linux shell. Each reply\n"
            "contains your reasoning and then exactly ONE shell command in a fenced\n"
            'block, like this:\n\n```bash\ngrep -rn "def add" .\n```\n\n'
            "The command runs in a persistent bash session (cd and exported variables\n"
            "persist) and you see its output in the next message. Edit files with shell\n"
            "tools (sed, cat <<'EOF' > file, python scripts). When the task is done,\n"
            "reply with the command `submit` alone in the block."
        ),
        "instance_template": _INSTANCE + "Run `submit`.",
        "format_error_template": (
            "Your reply could not be used: {{error}}\n"
            "Reply again with exactly one ```bash fenced block containing one command."
        ),
        **_COMMON,
    },
}
"""The templates used where spec.agent.templates leaves one unset, per action format."""

DEFAULT_BLOCKLIST = (
    "vim",
    "vi",
    "emacs",
    "nano",
    "nohup",
    "gdb",
    "less",
    "more",
    "tail -f",
    "python -m venv",
    "top",
    "htop",
    "watch",
)
DEFAULT_BLOCKLIST_STANDALONE = (
    "python",
    "python3",
    "ipython",
    "bash",
    "sh",
    "/bin/bash",
    "/bin/sh",
    "su",
    "vi",
    "vim",
    "emacs",
    "nano",
)
DEFAULT_SHELL_ENV = {
    "PAGER": "cat",
    "MANPAGER": "cat",
    "GIT_PAGER": "cat",
    "LESS": "-R",
    "PIP_PROGRESS_BAR": "off",
    "TQDM_DISABLE": "1",
    "PIP_NO_INPUT": "1",
}
