"""`mergesmith hub …`: search, inspect, download, manage and upload models of the Hugging Face Hub."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guiapp.cli.options import MAX_SEARCH_RESULTS, count_of
from guiapp.cli.process import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from guiapp.cli.terminal import TerminalProgress


def add_hub_commands(commands: argparse._SubParsersAction) -> None:
    hub = commands.add_parser("hub", help="Search, inspect, download and manage models from the Hugging Face Hub.")
    hub.add_argument("--offline", action="store_true", help="Use only what is on this machine (like HF_HUB_OFFLINE=1).")
    hub_commands = hub.add_subparsers(title="hub commands", metavar="HUB_COMMAND", required=True)

    search = hub_commands.add_parser("search", help="Search models on the Hub.")
    search.add_argument("query", nargs="?", default="", help="Text to look for in model names.")
    search.add_argument("--sort", default="trending", choices=["trending", "downloads", "likes", "updated"],
                        help="Order of the results: trending (popular lately, the default), downloads (most "
                        "downloaded), likes (most liked) or updated (most recently changed).")
    search.add_argument("--limit", type=count_of("results", MAX_SEARCH_RESULTS), default=20,
                        help=f"How many results (default: 20, at most {MAX_SEARCH_RESULTS}).")
    search.add_argument("--author", default=None, help="Only models of this user or organisation.")
    search.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
    search.set_defaults(handler=_run_hub_search)

    info = hub_commands.add_parser("info", help="Show a model's details (and tensors) without downloading weights.")
    info.add_argument("repo", help="A Hub model id, optionally with @revision.")
    info.add_argument("--tensors", action="store_true", help="Also list tensors from the safetensors headers.")
    info.add_argument("--json", action="store_true", help="Print JSON.")
    info.set_defaults(handler=_run_hub_info)

    check = hub_commands.add_parser("check", help="Check from headers alone whether models can be merged.")
    check.add_argument(
        "models", nargs="+", help="Hub ids (optionally @revision) and local folders; the first is the base."
    )
    check.set_defaults(handler=_run_hub_check)

    download = hub_commands.add_parser("download", help="Download the files a merge needs into the Hugging Face cache.")
    download.add_argument("repo", help="A Hub model id, optionally with @revision.")
    download.add_argument("--revision", default=None, help="Branch, tag or commit (default: main).")
    download.set_defaults(handler=_run_hub_download)

    cache = hub_commands.add_parser("cache", help="List the models in the Hugging Face cache.")
    cache.add_argument("--json", action="store_true", help="Print JSON.")
    cache.set_defaults(handler=_run_hub_cache)

    remove = hub_commands.add_parser("rm", help="Delete a model from the Hugging Face cache.")
    remove.add_argument("repo", help="The cached model id.")
    remove.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
    remove.set_defaults(handler=_run_hub_rm)

    upload = hub_commands.add_parser(
        "upload", help="Publish a model folder or a GGUF file to the Hub (private unless --public), with a model "
        "card.")
    upload.add_argument("folder", type=Path, metavar="FOLDER|FILE.gguf",
                        help="The model or adapter folder to publish, or a GGUF file (or a folder of them).")
    upload.add_argument("repo", help="The repo to publish to: your-user-name/model-name (a bare name goes under "
                        "your user name).")
    visibility = upload.add_mutually_exclusive_group()
    visibility.add_argument("--private", dest="public", action="store_false", default=False,
                            help="Only you (and your organisation) can see it (the default).")
    visibility.add_argument("--public", dest="public", action="store_true", help="Everyone can see it.")
    upload.add_argument("--licence", "--license", dest="licence", default=None,
                        help="The licence in the card (default: the one the input models share, else 'other').")
    upload.add_argument("--force", action="store_true",
                        help="Publish the folder even though it does not look like a model or an adapter.")
    upload.set_defaults(handler=_run_hub_upload)


def _hub_setup(args: argparse.Namespace) -> None:
    from guiapp.hub.connection import set_offline

    set_offline(True if args.offline else None)  # without --offline, the environment decides


def _run_hub_search(args: argparse.Namespace) -> int:
    import json

    from guiapp.hub.search import ModelSearch, SearchQuery

    _hub_setup(args)
    query = SearchQuery(text=args.query, author=args.author, sort=args.sort, limit=args.limit)
    results = ModelSearch(page_size=args.limit).start(query).next_page()
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2))
        return EXIT_OK
    if not results:
        print("No models found.")
    for r in results:
        size = f"{_parameter_count(r.parameters)} params" if r.parameters else ""
        gated = "gated" if r.gated else ""
        print(f"{r.repo_id:<50} {r.downloads:>10} downloads {r.likes:>6} likes  {size:<14} {gated}")
    return EXIT_OK


def _parameter_count(count: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return str(count)


def _run_hub_info(args: argparse.Namespace) -> int:
    import json

    from guiapp.checkpoints.quantized.naming import settings_summary
    from guiapp.errors import CheckpointError
    from guiapp.hub.details import model_details, remote_tensors
    from guiapp.hub.references import ModelRef
    from guiapp.hub.resolve import read_model_metadata
    from guiapp.system.units import format_bytes, plural

    _hub_setup(args)
    ref = ModelRef.parse(args.repo)
    if ref.hub_id is None:
        print(f"mergesmith hub info: {_not_a_hub_id(ref)}", file=sys.stderr)
        return EXIT_USAGE
    details = model_details(ref.hub_id, ref.revision)
    tensors = remote_tensors(ref.hub_id, details.commit) if args.tensors else {}
    try:
        quantization = settings_summary(read_model_metadata(ModelRef.parse(f"{details.repo_id}@{details.commit}")).config)
    except CheckpointError:  # no config.json or no safetensors: the rest of the details stand
        quantization = None
    if args.json:
        data = {**details.to_json(), "quantization": quantization}
        if args.tensors:
            data["tensors"] = {
                t.name: {"shape": list(t.shape), "dtype": t.dtype, "file": t.file} for t in tensors.values()
            }
        print(json.dumps(data, indent=2))
        return EXIT_OK
    by_dtype = ", ".join(f"{count:,} {dtype}" for dtype, count in details.parameters_by_dtype.items())
    _print_shown(f"Model:         {details.repo_id} @ {details.revision} ({details.commit[:10]})")
    _print_shown(f"Page:          {details.page_url}")
    gated = " (gated: accept it on the page)" if details.gated else ""
    _print_shown(f"Licence:       {details.licence or 'not stated'}{gated}")
    _print_shown(f"Base model:    {', '.join(details.base_models) or '-'}")
    _print_shown(f"Parameters:    {by_dtype or 'unknown (no safetensors)'}")
    if quantization:
        _print_shown(f"Quantized:     {quantization}")
    _print_shown(f"Download:      {format_bytes(details.download_size)} needed for merging "
                 f"(repo: {format_bytes(details.repo_size)}, {plural(len(details.files), 'file')})")
    _print_shown(f"Popularity:    {details.downloads} downloads, {details.likes} likes")
    _print_shown(f"Updated:       {details.last_modified or '-'}")
    for t in tensors.values():
        _print_shown(f"  {t.name:<60} {t.dtype:<5} {'×'.join(map(str, t.shape))}")
    return EXIT_OK


def _print_shown(text: str) -> None:
    """Print a line holding what a Hub server sent, without its control characters (escape sequences)."""
    from guiapp.system.scrub import shown

    print(shown(text))


def _not_a_hub_id(ref) -> str:
    """Why a reference that is not a Hub id cannot be looked up on the Hub (hub info, hub download)."""
    from guiapp.errors import CheckpointError
    from guiapp.system.bounded import describe_value

    shown = describe_value(str(ref))
    try:
        folder = ref.existing_folder()
    except CheckpointError:  # no such folder: the text is simply not an id
        folder = None
    if folder is not None:
        return f"{shown} is a folder on this computer, not a Hub model id (org/name)."
    return (f"{shown} is not a Hub model id: an id is org/name, each part at most 96 letters, digits, "
            "'-', '_' or '.'.")


def _run_hub_check(args: argparse.Namespace) -> int:
    from guiapp.hub.references import ModelRef
    from guiapp.merging.compatibility import check_compatibility  # torch-free

    _hub_setup(args)
    report = check_compatibility([ModelRef.parse(text) for text in args.models])
    print(report.render_text())
    return EXIT_OK if report.compatible else EXIT_FAILED


def _run_hub_download(args: argparse.Namespace) -> int:
    from guiapp.hub.downloads import download_model
    from guiapp.hub.references import ModelRef
    from guiapp.progress import Progress

    _hub_setup(args)
    ref = ModelRef.parse(args.repo)
    if ref.hub_id is None:
        print(f"mergesmith hub download: {_not_a_hub_id(ref)}", file=sys.stderr)
        return EXIT_USAGE
    printer = TerminalProgress()
    progress = Progress(on_event=lambda event: printer.on_event(None, event))
    folder = download_model(ref.hub_id, args.revision or ref.revision, progress=progress)
    printer.finish()
    print(folder)
    return EXIT_OK


def _run_hub_cache(args: argparse.Namespace) -> int:
    import json

    from guiapp.hub.cache import scan_cache
    from guiapp.system.units import format_bytes, plural

    _hub_setup(args)
    models = scan_cache()
    if args.json:
        print(json.dumps([m.to_json() for m in models], indent=2))
        return EXIT_OK
    if not models:
        print("The Hugging Face cache holds no models.")
    for m in models:
        refs = ", ".join(ref for r in m.revisions for ref in r.refs) or plural(len(m.revisions), "revision")
        print(f"{m.repo_id:<50} {format_bytes(m.size):>10}  last used {m.last_used:%Y-%m-%d %H:%M}  ({refs})")
    return EXIT_OK


def _run_hub_rm(args: argparse.Namespace) -> int:
    from guiapp.hub.cache import plan_deletion
    from guiapp.system.units import format_bytes, plural

    _hub_setup(args)
    plan = plan_deletion(args.repo)
    question = (
        f"Delete {plan.repo_id} ({plural(len(plan.commits), 'revision')}) from the cache? "
        f"This frees {format_bytes(plan.freed_bytes)}."
    )
    if not args.yes:
        try:
            answer = input(f"{question} [y/N] ").strip().lower()
        except EOFError:  # no one to answer (stdin closed or at its end): never delete without a yes
            print("\nNothing was deleted: there is no input to answer the question; add --yes to delete without "
                  "asking.", file=sys.stderr)
            return EXIT_FAILED
        if answer not in ("y", "yes"):
            print("Nothing was deleted.")
            return EXIT_OK
    plan.execute()
    print(f"Deleted {plan.repo_id}; freed {format_bytes(plan.freed_bytes)}.")
    return EXIT_OK


def _run_hub_upload(args: argparse.Namespace) -> int:
    from guiapp.hub.publish_card import input_licences, licence_warnings, preset_licence
    from guiapp.hub.upload import check_upload, upload_folder
    from guiapp.jobs.publish import model_card, source_models
    from guiapp.progress import Progress

    _hub_setup(args)
    plan = check_upload(args.folder, args.repo, private=not args.public, any_folder=args.force)
    inputs = input_licences(source_models(args.folder))
    for warning in licence_warnings(inputs):
        print(f"Warning: {warning}", file=sys.stderr)
    card = model_card(args.folder, plan.repo_id, args.licence or preset_licence(inputs))
    printer = TerminalProgress()
    url = upload_folder(plan, Progress(on_event=lambda event: printer.on_event(None, event)), card=card)
    printer.finish()
    print(f"Published {plan.repo_id} ({'private' if plan.private else 'public'}): {url}")
    return EXIT_OK
