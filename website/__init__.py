"""The course's website: `make docs` (website/build.py) with Sphinx's configuration in website/conf.py."""
