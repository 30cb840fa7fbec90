"""Sphinx's configuration of the course's website (python -m website.build writes the sources it reads).

MyST-NB renders the notebooks without running them (with a recorded run's outputs, website/outputs.py), and the
book theme gives each notebook page its launch buttons (Binder and JupyterHub), pointed where website.build.launch()
says, as the page's own box is.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from website.build import MATHJAX, launch  # noqa: E402

project = "Distributed Deep Learning on HPC"
author = "the course's authors"
extensions = ["myst_nb", "sphinx.ext.githubpages"]  # githubpages: a .nojekyll, so GitHub Pages serves _static/
# The notebooks' $...$ and $$...$$ as JupyterLab shows them: MathJax 3 typesets them in the reader's browser, served
# from the site's own _static/mathjax/ (scripts/setup-mathjax.sh fetches its npm package), so they render offline
myst_enable_extensions = ["dollarmath", "amsmath"]
html_static_path = [str(MATHJAX)]
mathjax_path = "mathjax/tex-mml-chtml.js"  # relative: under _static/
# The instructor guide's links to a heading of another page (06-slurm.md#grading-a-class-on-the-cluster): the same
# anchors as GitHub makes, so one link works in both
myst_heading_anchors = 3
nb_execution_mode = "off"  # nothing run here: the outputs are a recorded run's (website/outputs.py), if given
language = "en"
# A cell Pygments cannot colour (a %%writefile of a shell script) is shown plain: no broken page, so no error
suppress_warnings = ["misc.highlighting_failure"]
html_theme = "sphinx_book_theme"
html_title = project
html_last_updated_fmt = None

WHERE = launch()
html_theme_options = {
    "repository_url": WHERE.repository,
    "repository_branch": WHERE.branch,
    "path_to_docs": "",  # the pages keep the student copy's layout: notebooks/NN_name.ipynb
    "use_repository_button": bool(WHERE.repository),
    "use_download_button": True,
    # no repository set (DOCS_REPOSITORY_URL): no launch buttons, rather than links to a placeholder
    "launch_buttons": {
        "notebook_interface": "jupyterlab",
        "binderhub_url": WHERE.binder,
        "jupyterhub_url": WHERE.hub,
    }
    if WHERE.repository
    else {},
}
