"""op_name -> scope path and pass (traceview.scopes.paths), on op_names as JAX writes them."""

from __future__ import annotations

from traceview.scopes.paths import MAX_COMPONENTS, parse_op_name


def test_backward_is_the_transposed_scope_and_jit_main_is_dropped():
    path = parse_op_name("jit(train_step)/jit(main)/transpose(jvp(Transformer))/layer_3/attn/dot_general")
    assert path.scopes == ("Transformer", "layer_3", "attn")
    assert path.pass_ == "backward" and path.program == "train_step"


def test_forward_and_other_passes():
    assert parse_op_name("jit(f)/jvp(Model)/mlp/mul").pass_ == "forward"
    other = parse_op_name("jit(f)/sgd/sub")
    assert other.pass_ == "other" and other.scopes == ("sgd",)


def test_control_flow_and_remat_markers_are_not_scopes():
    path = parse_op_name("pjit(step)/while/body/checkpoint/shard_map/vmap(layer)/remat/mlp/dot_general")
    assert path.scopes == ("layer", "mlp") and path.program == "step"


def test_merged_names_keep_their_common_prefix_and_a_mixed_pass_is_other():
    path = parse_op_name("jit(f)/jvp(M)/a/b/mul;jit(f)/jvp(M)/a/c/add")
    assert path.scopes == ("M", "a") and path.pass_ == "forward"
    assert parse_op_name("jit(f)/jvp(M)/a/mul;jit(f)/transpose(jvp(M))/a/mul").pass_ == "other"


def test_names_with_no_scope():
    assert parse_op_name("") is None
    assert parse_op_name("reduce_sum").scopes == ()                  # a bare primitive (reducer body)
    assert parse_op_name("jit(f)/add").scopes == ()                  # at the program itself


def test_hostile_names_are_bounded():
    deep = "jit(f)/" + "/".join(f"s{i}" for i in range(10_000)) + "/mul"
    assert len(parse_op_name(deep).scopes) <= MAX_COMPONENTS
    nested = "jit(f)/" + "jvp(" * 5000 + "x" + ")" * 5000 + "/mul"
    assert parse_op_name(nested) is not None



def test_a_source_file_captured_elsewhere_is_found_by_its_longest_tail(tmp_path):
    from traceview.scopes.source import line_texts, resolve_source

    repo = tmp_path / "checkout"
    (repo / "model").mkdir(parents=True)
    (repo / "model" / "attn.py").write_text("import jax\nscores = q @ k\n")
    (repo / "attn.py").write_text("other\nnot this one\n")
    captured = "/home/ci/build/repo/model/attn.py"
    assert resolve_source(captured, [repo]) == repo / "model" / "attn.py"        # the longest tail wins
    assert resolve_source(str(repo / "attn.py"), [tmp_path]) == repo / "attn.py"  # a path that exists is itself
    assert resolve_source("/nowhere/else.py", [repo]) is None
    assert line_texts([(captured, "2"), (captured,), (captured, "9")], [repo]) == ["scores = q @ k", None, None]
