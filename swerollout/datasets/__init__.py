"""Task datasets as they are published: reading the files, and each dataset's conventions.

SWE-bench (full, Lite, Verified, Multimodal), SWE-Gym, SWE-smith and SWE-rebench publish
rows in SWE-bench's field names with small differences: where the image is named, whether
the eval script ships in the row, how the tests are listed. :mod:`files` reads a dataset in
any of its published forms into plain rows; :mod:`conventions` knows each dataset's image
naming; :mod:`eval_scripts` finds or writes the eval script. swerollout.instances turns a
row into an instance with their help.
"""

from swerollout.datasets.conventions import DatasetKind, detect_kind, image_for
from swerollout.datasets.eval_scripts import EvalPlan, EvalScriptUnavailable, eval_plan_for
from swerollout.datasets.files import DatasetFileError, read_rows

__all__ = [
    "DatasetFileError",
    "DatasetKind",
    "EvalPlan",
    "EvalScriptUnavailable",
    "detect_kind",
    "eval_plan_for",
    "image_for",
    "read_rows",
]
