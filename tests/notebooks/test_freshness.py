"""Generated notebooks must match what generates them: text twin → source/, source/ → release/."""

from tools import build_notebooks, release


def test_source_notebooks_match_their_text_twins():
    stale = []
    for slug in build_notebooks.slugs([]):
        target = build_notebooks.SOURCE_DIR / slug / f"{slug}.ipynb"
        fresh = build_notebooks.dumps(build_notebooks.build(slug, execute=False))
        if not target.exists() or build_notebooks._comparable(target.read_text()) != build_notebooks._comparable(fresh):
            stale.append(str(target))
    assert not stale, f"out of date, run `make notebooks`: {stale}"


def test_release_matches_what_nbgrader_generates_from_source():
    stale = release.differences(release.assignments([]))
    assert not stale, f"stale release files, run `make release`: {stale}"
