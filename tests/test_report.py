"""The experiment page (host/report.py write_html)."""


def test_html_page_embeds_the_tables_and_figures(tmp_path):
    """report.html: every Markdown file rendered (tables as <table>), a figure it shows embedded
    where it stands, the others after the text, no reference to another file."""
    import base64

    from rlhls.host.figures import write_html

    assert write_html(tmp_path) is None  # nothing to show: no page
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
    (tmp_path / "curve.png").write_bytes(png)
    (tmp_path / "extra.png").write_bytes(png[::-1])
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "reward.png").write_bytes(png[:20])
    (tmp_path.parent / "outside.png").write_bytes(png)
    (tmp_path / "summary.md").write_text("# Summary\n\n| a | b |\n|---|---|\n| 1 | 2 & 3 |\n\n![curve](curve.png)\n"
                                         "![missing](nothere.png)\n![run](train/reward.png)\n"
                                         "![out](../outside.png)\n")
    (tmp_path / "table.md").write_text("## Second\n\ntext\n")
    page = write_html(tmp_path, "t & co").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<title>t &amp; co</title>" in page
    assert "<table>" in page and "<td>2 &amp; 3</td>" in page
    assert page.index("<h1>Summary</h1>") < page.index(base64.b64encode(png).decode()) < page.index("<h2>Second</h2>")
    assert base64.b64encode(png[::-1]).decode() in page and 'src="curve.png"' not in page
    assert 'src="nothere.png"' in page  # not ours to embed: left as written
    assert base64.b64encode(png[:20]).decode() in page and 'src="train/reward.png"' not in page  # a subfolder's
    assert 'src="../outside.png"' in page  # outside the folder: left as written
