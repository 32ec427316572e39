"""The project model: what one file cannot tell about another, built once per run from summaries.

Layer 2b, between the per-file models (triage, names, kernel model) and the rules:

- ``layout``: the project's root, each file's module name, import resolution.
- ``summary``: one file's summary, read from Python's ``ast`` (imports, definitions, classes,
  module options, and every host function's operations in program order). Summaries hold no
  tree; they are cached by content, so an unchanged file is never parsed for the project model.
- ``index``: all summaries of a project, and what a name means anywhere in it (imports,
  re-exports, classes and their methods, the types of attributes).
- ``recordings``: each tape recording followed through calls, across functions, classes and
  files, as the host events the host rules read.
- ``contexts``: the differentiation contexts (differentiated, public, unknown, forward-only,
  unreachable), which are reported, and the context of a definition with its reason; ``reach``:
  what calls and launches the recordings cannot follow may reach, and what the public API reaches.
- ``factories``: where a factory's products go (the callers of a func a factory makes);
  ``finding_contexts``: a finding's own context, narrowed by the gradient and the code it is about.
- ``model``: the facade the engine and the faces use.
"""
