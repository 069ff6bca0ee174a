"""A stand-in for slime's ``Sample`` (slime is not installable here: github.com/THUDM/slime,
the PyPI package of that name is another project). Field names, annotations, defaults
and the Status enum are slime's; tests/swerollout/trainers/test_slime.py checks them
against slime's source kept in tests/swerollout/trainers/fixtures/slime_sample.py.txt.
Methods are left out: the adapter reads and writes fields only."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    prompt: str | list[dict[str, str]] = ""
    tokens: list[int] = field(default_factory=list)
    multimodal_inputs: dict[str, Any] | None = None
    multimodal_train_inputs: dict[str, Any] | None = None
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: float | dict[str, Any] | None = None
    loss_mask: list[int] | None = None
    weight_versions: list[str] = field(default_factory=list)
    rollout_log_probs: list[float] | None = None
    rollout_routed_experts: list[list[int]] | None = None
    remove_sample: bool = False
    teacher_log_probs: list[float] | None = None
    mopd_teacher_log_probs: dict[str, list[float]] | None = None

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    generate_function_path: str | None = None
    train_metadata: dict | None = None
    session_id: str | None = None
    non_generation_time: float = 0.0

    @dataclass
    class SpecInfo:
        spec_accept_token_num: int = 0
        spec_draft_token_num: int = 0
        spec_verify_ct: int = 0
        completion_token_num: int = 0

    spec_info: SpecInfo = field(default_factory=SpecInfo)

    @dataclass
    class PrefixCacheInfo:
        cached_tokens: int = 0
        total_prompt_tokens: int = 0

    prefix_cache_info: PrefixCacheInfo = field(default_factory=PrefixCacheInfo)


class DataSource:
    """slime's data source as a rollout function sees it: ``get_samples(n)`` hands out n
    groups (from the buffer first: what ``add_samples`` gave back, as partial rollout
    does), ``add_samples`` returns groups to the buffer."""

    def __init__(self, prompts: list[dict[str, Any]], group_size: int) -> None:
        self.prompts = prompts
        self.group_size = group_size
        self.buffer: list[list[Sample]] = []
        self.next_prompt = 0
        self.next_index = 0

    def get_samples(self, n: int) -> list[list[Sample]]:
        groups = self.buffer[:n]
        self.buffer = self.buffer[n:]
        while len(groups) < n:
            row = self.prompts[self.next_prompt % len(self.prompts)]
            group = []
            for _ in range(self.group_size):
                group.append(Sample(group_index=self.next_prompt, index=self.next_index, metadata={"instance": row}))
                self.next_index += 1
            self.next_prompt += 1
            groups.append(group)
        return groups

    def add_samples(self, groups: list[list[Sample]]) -> None:
        self.buffer.extend(groups)
