"""The append-only token list of one conversation, with per-token training metadata.

Four parallel arrays, one entry per token:

- ``input_ids``: the token ids, prompt first.
- ``loss_mask``: 1 when the policy sampled the token, 0 for prompt/template/environment tokens.
- ``logprobs``: the sampling logprob of a policy token, 0.0 where the mask is 0.
- ``weight_versions``: which policy version sampled the token (``None`` where the mask is 0).

Nothing is ever removed or rewritten: the next request's ``input_ids`` is always the
previous request's ``input_ids + output_ids + delta``. Versions are stored as small
indices into a table, which keeps the snapshot compact (most runs use one or two).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class TokenBuffer:
    input_ids: list[int] = field(default_factory=list)
    loss_mask: bytearray = field(default_factory=bytearray)
    logprobs: list[float] = field(default_factory=list)
    version_index: list[int] = field(default_factory=list)
    """Index into ``versions``; 0 means no version (the token was not sampled)."""
    versions: list[str | None] = field(default_factory=lambda: [None])
    prompt_length: int = 0
    """Tokens of the first request (the rendered initial messages)."""
    _json_chunks: list[str] = field(default_factory=list, repr=False, compare=False)
    _json_count: int = field(default=0, repr=False, compare=False)
    _json_text: str = field(default="", repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def sampled_tokens(self) -> int:
        return sum(self.loss_mask)

    def set_prompt(self, ids: Sequence[int]) -> None:
        if self.input_ids:
            raise ValueError("the prompt can only be set on an empty token buffer")
        self.append_context(ids)
        self.prompt_length = len(ids)

    def append_context(self, ids: Sequence[int]) -> None:
        """Tokens the policy did not sample (template and environment deltas)."""
        n = len(ids)
        self.input_ids.extend(ids)
        self.loss_mask.extend(bytes(n))
        self.logprobs.extend([0.0] * n)
        self.version_index.extend([0] * n)

    def append_sampled(self, ids: Sequence[int], logprobs: Sequence[float], weight_version: str | None) -> None:
        """Tokens the policy sampled, exactly as the server returned them."""
        if len(logprobs) != len(ids):
            raise ValueError(f"{len(ids)} sampled tokens but {len(logprobs)} logprobs")
        n = len(ids)
        self.input_ids.extend(ids)
        self.loss_mask.extend(b"\x01" * n)
        self.logprobs.extend(logprobs)
        self.version_index.extend([self._version_slot(weight_version)] * n)

    def _version_slot(self, version: str | None) -> int:
        # A sampled token always gets a real slot (>0) even with an unknown version,
        # so mask-1 tokens are never confused with context tokens.
        key = version if version is not None else ""
        for i, known in enumerate(self.versions[1:], start=1):
            if known == key:
                return i
        self.versions.append(key)
        return len(self.versions) - 1

    def ids_json(self) -> str:
        """``input_ids`` as JSON array items (no brackets), encoded incrementally.

        Every request sends the whole context; re-encoding 32k ids costs milliseconds
        per turn, so only the ids appended since the last call are encoded.
        """
        if self._json_count < len(self.input_ids):
            self._json_chunks.append(",".join(map(str, self.input_ids[self._json_count :])))
            self._json_count = len(self.input_ids)
            self._json_text = ",".join(self._json_chunks)
        return self._json_text

    @property
    def weight_versions(self) -> list[str | None]:
        table = self.versions
        return [table[i] if i else None for i in self.version_index]

    def check(self) -> None:
        """Raise ValueError if the parallel arrays disagree (used after restoring)."""
        n = len(self.input_ids)
        sizes = {len(self.loss_mask), len(self.logprobs), len(self.version_index)}
        if sizes != {n}:
            raise ValueError(f"token arrays disagree in length: ids={n}, others={sorted(sizes)}")
        if n and max(self.loss_mask) > 1:
            raise ValueError("loss_mask holds values other than 0 and 1")
        if n and (min(self.version_index) < 0 or max(self.version_index) >= len(self.versions)):
            raise ValueError("a weight-version index points outside the version table")
        if not 0 <= self.prompt_length <= n:
            raise ValueError(f"prompt_length {self.prompt_length} outside 0..{n}")
