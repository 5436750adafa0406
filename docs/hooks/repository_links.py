"""An MkDocs hook: links that README.md and CHANGELOG.md write for the repository work on the site.

README.md and CHANGELOG.md sit at the repository's root and link into docs/ (`docs/gpus.md`), so
the links work on GitHub. The site's pages include parts of them (pymdownx.snippets: the front
page's example, launch lines and figures, the whole changelog) into pages of docs/ itself, where
the same link must read `gpus.md`. This adds a Markdown preprocessor that runs right after the
snippets are included and drops the `docs/` of such links. No page of docs/ links to a `docs/`
folder of its own, so nothing else is touched.

mkdocs.yml loads it (`hooks:`).
"""

import markdown


class _RepositoryLinks(markdown.preprocessors.Preprocessor):
    def run(self, lines):
        return [line.replace("](docs/", "](") for line in lines]


class RepositoryLinks(markdown.Extension):
    """Registers the preprocessor below pymdownx.snippets' (priority 32), so it sees included text."""

    def extendMarkdown(self, md):  # noqa: N802 (Python-Markdown's name)
        md.preprocessors.register(_RepositoryLinks(md), "tfring_repository_links", 31)


def on_config(config, **kwargs):
    config.markdown_extensions.append(RepositoryLinks())
    return config
