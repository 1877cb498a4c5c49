"""Hands kernix's build_py to setuptools: it compiles [tool.kernix.modules] into the wheel."""

from setuptools import setup

from kernix.prebuilt.setuptools_hook import kernix_setup_kwargs

setup(**kernix_setup_kwargs())
