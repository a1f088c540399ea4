"""The tutorial notebook (examples/tutorial.ipynb) executes from top to bottom, figures included."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def test_tutorial_notebook_executes(tmp_path):
    nb = nbformat.read(ROOT / "examples" / "tutorial.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "csim pass" in text and "every check passed: True" in text
    assert "3000 environment steps" in text and "the plan" in text  # the run and the performance model
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2  # the Gantt chart and the learning curve
    assert (tmp_path / "runs" / "tutorial" / "report.md").is_file()
