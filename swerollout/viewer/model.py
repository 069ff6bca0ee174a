"""One rollout as the viewer reads it: the shape `swerollout results` writes
(:meth:`swerollout.client.RolloutRecord.to_dict`), validated at the boundary."""

from __future__ import annotations

from pydantic import model_validator

from swerollout.client.records import RecordRow


class ViewRecord(RecordRow):
    """A results row (the client's RecordRow, the columns `swerollout results` writes), with
    its token arrays checked to be aligned. Older files lack the newer fields; they default to empty."""

    @model_validator(mode="after")
    def _aligned(self) -> ViewRecord:
        n = len(self.response_ids)
        for name in ("loss_mask", "logprobs", "weight_versions"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries but response_ids has {n}")
        return self
