"""The post sandbox: only the handed-in functions, no Python internals, no files."""

import pytest

from runner.publish.blocks.templating import TemplateProblem, render_post_body
from runner.publish.site.post import render_post
from runner.publish.stats.claims import Measured

REFUSED = [
    "{{ ''.__class__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ m.__class__.__init__.__globals__ }}",
    "{{ f.__globals__ }}",
    "{{ f.__self__ }}",
    "{% include '/etc/passwd' %}",
    "{% import 'os' as os %}",
    "{{ lipsum() }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{{ nothing_here }}",
]


@pytest.mark.parametrize("template", REFUSED)
def test_sandbox_refuses_internals_and_files(template):
    m = Measured(0.25, 0.2, 0.3, 2, "change", "x")
    with pytest.raises(TemplateProblem + (TypeError,)):
        render_post_body(template, {"m": m, "f": test_sandbox_refuses_internals_and_files})


def test_sandbox_allows_measured_fields_and_plain_values():
    m = Measured(0.25, 0.2, 0.3, 2, "change", "x")
    out = render_post_body("{{ m }} {{ m.n_rounds }} {{ 'ab'.upper() }} {{ '<b>' }}", {"m": m})
    assert out == "+25.0% 2 AB &lt;b&gt;"


def test_a_refused_template_is_a_failure_naming_file_and_line(fixture_db):
    body = "# Title\n\nfine line\n{{ ''.__class__ }}\n"
    post = render_post(
        body, {"experiment": "spec-fixture"}, key="blog/posts/x.md", db_path=fixture_db, line_offset=3
    )
    refused = [f for f in post.failures if "sandbox" in f.message]
    assert len(refused) == 1
    assert refused[0].describe().startswith("blog/posts/x.md:7: template refused by the sandbox")
