"""What the tests share, imported as ``tests.helpers.<module>`` by the library's tests and the recipes' alike:

- ``models``: tiny configurations and batches, saved random models, recording calls, checking model cards;
- ``launch``: loading the scripts and benchmarks in-process, running them in new processes (python, torchrun,
  accelerate launch), generated corpora, reading the job scripts' commands;
- ``generation``: comparing two ``generate`` runs that take different kernels;
- ``browser``: headless Chromium for the tests that click through a page.
"""
