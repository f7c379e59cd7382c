"""`runner build` and `runner audit`: exit codes 0 / 1 / 2 and readable output."""

from publish_project import post_text, write_project

from runner.cli import main


def test_audit_prints_every_claim_and_exits_1_on_a_failure(tmp_path, fixture_db, capsys):
    good = write_project(tmp_path / "good", fixture_db, {"p.md": post_text("+25%")})
    assert main(["audit", "-f", str(good)]) == 0
    out = capsys.readouterr().out
    assert "blog/posts/p.md:10" in out and "'+25%'" in out and "ok" in out
    bad = write_project(tmp_path / "bad", fixture_db, {"p.md": post_text("+31%")})
    assert main(["audit", "-f", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "measured       +25." in out and "1 failure(s)" in out


def test_bad_config_is_exit_2_without_traceback(tmp_path, capsys):
    for verb in ("audit", "build"):
        assert main([verb, "-f", str(tmp_path / "missing.yml")]) == 2
        err = capsys.readouterr().err
        assert "missing.yml" in err and "no such mkdocs config file" in err
        assert "Traceback" not in err


def test_build_is_strict_and_exits_1_on_failure(tmp_path, fixture_db, capsys):
    bad = write_project(tmp_path, fixture_db, {"p.md": post_text("+31%")})
    assert main(["build", "-f", str(bad), "-d", str(tmp_path / "s1")]) == 1
    assert "strict mode" in capsys.readouterr().err
    assert main(["build", "-f", str(bad), "-d", str(tmp_path / "s2"), "--no-strict"]) == 0
