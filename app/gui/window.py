"""The main window: canvas in the centre, docks for preset, parameters, variants, view and export.

The window never touches the engine: it sends commands to the
:class:`~nagare.app.gui.worker.SimulationWorker` and, on a 60 Hz timer, takes the newest frame
packet and the notices the worker left (the variant table arrives as a copy in the "engine"
notice). Notices are dispatched through a table (notice kind → method).
"""
from __future__ import annotations

import json
import logging
import time
import tomllib
import typing
from pathlib import Path

from nagare.app import colormaps, presetinfo
from nagare.engine.backend import get_backend
from nagare.engine.checkpoint import load_checkpoint
from nagare.engine.errors import NagareError, PresetError
from nagare.engine.presets import PRESET_DIR, load_preset, preset_names, raw_dict, validate
from pydantic import BaseModel
from PyQt6 import QtCore, QtGui, QtWidgets

from ..headless import vtkhdf_fields
from . import export
from .canvas import FieldCanvas
from .hud import Hud, choice_tooltip
from .pacing import FramePacer, poll_interval
from .probe import Probes
from .slice_drag import SliceDrag
from .tooltips import TooltipWrapper
from .typing_guard import TypingGuard
from .wheel_zoom import WheelZoom
from .worker import SimulationWorker

log = logging.getLogger("nagare")
Qt = QtCore.Qt

KEYS_HELP = """<b>Keys</b><br>
Space — play / pause<br>N — single step<br>R — reset<br>S — screenshot (PNG)<br>
V — start / stop video recording (MP4)<br>H — this help<br>F1 — show / hide the HUD<br>
1–9 — show field 1–9<br>PgUp / PgDn — move the 3D slice<br>
Home — reset the camera (frame the data)<br>B — colour bar on / off<br>
Mouse: drag pans (2D) or orbits (3D), the wheel zooms about the pointer (2D and 3D); on a 2D
field or a 3D slice plane a click reads the value under the pointer and Shift+drag draws a line
probe with its profile in the HUD (Esc clears). 3D: drag a slice plane to move it along its
normal; drag beside the planes, or Ctrl+drag anywhere, orbits; Shift+drag beside the planes pans."""

DEFAULT_FPS = 30.0  # the frame cap unless the user sets one (View ▸ Frame cap, `nagare gui --fps N`)
FPS_CHOICES = (10, 15, 24, 30, 60, 75, 90, 120, 144, 165, 240)  # the View menu's caps, up to the refresh rate
MAX_EDITOR_WIDTH = 150  # px: asks for a row of its own (label above); a longer literal scrolls inside it
SKIP_SECTIONS = {"view", "run", "variants", "cpu_overrides", "engine", "description", "extends"}


def default_preset_name() -> str:
    names = preset_names()
    for name in ("lbm2d-cylinder",):
        if name in names:
            return name
    return names[0]


def throughput_text(updates_per_s: float, gbytes_per_s: float) -> str:
    """The status line's throughput: million updates a second with three significant digits below 1
    (a NumPy SPH run's 0.025 MUPS read "0.0 MUPS"), one decimal below 10, none above."""
    mups = updates_per_s / 1e6
    digits = f"{mups:,.0f}" if mups >= 10 else f"{mups:.1f}" if mups >= 1 else f"{mups:.3g}"
    return f"{digits} MUPS · {gbytes_per_s:.2f} GB/s"


class ParameterForm(QtWidgets.QWidget):
    """A form generated from the preset's pydantic model: one editor per leaf of each section."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.lay = QtWidgets.QVBoxLayout(self)
        self.note = QtWidgets.QLabel("Physical parameters set the initial state: <b>Apply resets the run</b>.")
        self.note.setWordWrap(True)
        self.lay.addWidget(self.note)
        self.form_host = QtWidgets.QWidget()
        self.form = QtWidgets.QFormLayout(self.form_host)
        # A narrow dock puts the label above its editor rather than squeezing (or clipping) the
        # editor: a long value (amr3d's τ derived from Re, 0.500013986013986) stays readable.
        self.form.setRowWrapPolicy(QtWidgets.QFormLayout.RowWrapPolicy.WrapLongRows)
        self.form.setFieldGrowthPolicy(QtWidgets.QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        scroll = QtWidgets.QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.form_host)
        self.lay.addWidget(scroll, 1)
        self.apply_button = QtWidgets.QPushButton("Apply (resets)")
        self.lay.addWidget(self.apply_button)
        self.editors: dict[tuple[str, ...], tuple[QtWidgets.QWidget, typing.Any]] = {}
        self.preset = None
        self._shown: dict = {}
        self.hidden: set[tuple[str, ...]] = set()  # knobs the preset's equation does not read (show_applicable)

    def load(self, preset) -> None:
        self.preset = preset
        while self.form.rowCount():
            self.form.removeRow(0)
        self.editors.clear()
        self._shown = {}
        for name, finfo in type(preset).model_fields.items():
            if name in SKIP_SECTIONS or finfo.exclude:
                continue
            value = getattr(preset, name)
            if isinstance(value, BaseModel):
                header = QtWidgets.QLabel(f"<b>[{name}]</b>")
                self.form.addRow(header)
                for sub, sinfo in type(value).model_fields.items():
                    self._add((name, sub), getattr(value, sub), sinfo)
            else:
                self._add((name,), value, finfo)
        self.show_applicable()

    def show_applicable(self) -> None:
        """Show only the knobs the preset's equation reads, as its model declares them
        (PresetBase.inapplicable_keys: a 1D advection preset has no Mach number). Follows the
        form's choices (problem, initial kind) as they are edited; hidden values are kept."""
        raw = raw_dict(self.preset)
        for key, (w, _) in self.editors.items():
            if isinstance(w, QtWidgets.QComboBox):  # the choices other knobs depend on, as edited
                node = raw
                for part in key[:-1]:
                    node = node.setdefault(part, {})
                node[key[-1]] = w.currentText()
        self.hidden = type(self.preset).inapplicable_keys(raw)
        for key, (w, _) in self.editors.items():
            self.form.setRowVisible(w, key not in self.hidden)

    def _add(self, key, value, info) -> None:
        ann = info.annotation
        args = typing.get_args(ann)
        if typing.get_origin(ann) is typing.Literal:
            w = QtWidgets.QComboBox()
            w.addItems([str(a) for a in args])
            w.setCurrentText(str(value))
            w.currentTextChanged.connect(lambda _: self.show_applicable())
        elif isinstance(value, bool):
            w = QtWidgets.QCheckBox()
            w.setChecked(value)
        elif isinstance(value, int):
            w = QtWidgets.QSpinBox()
            w.setRange(-2**31 + 1, 2**31 - 1)
            w.setValue(value)
        elif isinstance(value, float):
            w = QtWidgets.QLineEdit(repr(value))
        else:
            w = QtWidgets.QLineEdit("" if value is None else _toml_literal(value))
            if value is None:
                w.setPlaceholderText("(not set)")
        if isinstance(w, QtWidgets.QLineEdit):
            # wide enough for the whole value (the form wraps the label above it when the dock is
            # narrow), and showing its start, not its end
            text_w = w.fontMetrics().horizontalAdvance(w.text() or w.placeholderText())
            w.setMinimumWidth(min(text_w + 16, MAX_EDITOR_WIDTH))
            w.setCursorPosition(0)
        # the schema's description on the editor and its label (a narrow dock clips long labels)
        tip = f"{'.'.join(key)}: {info.description}" if info.description else ".".join(key)
        derived = self.preset.derived_fields().get(key) if self.preset is not None else None
        if derived:
            tip = f"derived from {derived} (edit that; to set {key[-1]} yourself, clear {derived})\n{tip}"
        w.setToolTip(tip)
        if isinstance(w, QtWidgets.QComboBox):  # each choice, with the whole description beside it
            for i in range(w.count()):
                w.setItemData(i, f"{w.itemText(i)} — {info.description or '.'.join(key)}",
                              Qt.ItemDataRole.ToolTipRole)
        self.form.addRow(f"{key[-1]} (from {derived.split('.')[-1]})" if derived else key[-1], w)
        label = self.form.labelForField(w)
        if label is not None:
            label.setToolTip(tip)
        self.editors[key] = (w, value)
        self._shown[key] = self._editor_value(w)

    @staticmethod
    def _editor_value(w):
        if isinstance(w, QtWidgets.QComboBox):
            return w.currentText()
        if isinstance(w, QtWidgets.QCheckBox):
            return w.isChecked()
        if isinstance(w, QtWidgets.QSpinBox):
            return w.value()
        return w.text()

    def values(self) -> dict:
        """The raw dict of the preset with the edited values (validated by the caller). A derived
        field left as shown is left out, so it follows its source (τ from an edited Re)."""
        raw = raw_dict(self.preset)
        derived = self.preset.derived_fields()
        for key, (w, _) in self.editors.items():
            if key in derived and self._editor_value(w) == self._shown.get(key):
                node = raw
                for part in key[:-1]:
                    node = node.setdefault(part, {})
                node.pop(key[-1], None)
                continue
            if isinstance(w, QtWidgets.QComboBox):
                v = w.currentText()
                original = self.editors[key][1]
                v = type(original)(v) if not isinstance(original, str) else v
            elif isinstance(w, QtWidgets.QCheckBox):
                v = w.isChecked()
            elif isinstance(w, QtWidgets.QSpinBox):
                v = w.value()
            else:
                text = w.text().strip()
                if not text:  # an empty editor is an unset optional key: leave it out
                    node = raw
                    for part in key[:-1]:
                        node = node.setdefault(part, {})
                    node.pop(key[-1], None)
                    continue
                try:
                    v = tomllib.loads(f"v = {text}")["v"]
                except tomllib.TOMLDecodeError:
                    v = text
            node = raw
            for part in key[:-1]:
                node = node.setdefault(part, {})
            node[key[-1]] = v
            if self._editor_value(w) != self._shown.get(key):
                # an edit beats the preset's [cpu_overrides] of the same key (applied again on CPU)
                _drop_path(raw.get("cpu_overrides"), key)
        for key in derived:  # derived values inside an editor's literal (a list's entries): always re-derived
            if "*" in key:
                _drop_path(raw, key)
        return raw


def packet_is_3d(pk) -> bool:
    """True for a packet the 3D dock acts on: a 3D grid (in 3D or as a slice, which the dock's
    "3D grids" switch brings back to 3D), 3D particles or 3D boxes."""
    if pk.kind in ("grid3d", "volume3d"):
        return True
    return any(a is not None and getattr(a, "ndim", 0) == 2 and int(a.shape[1]) == 3 for a in (pk.positions, pk.lo))


def _drop_path(node, key: tuple) -> None:
    """Remove ``key`` (a path whose "*" parts match every list entry) from a raw preset dict."""
    if not key:
        return
    head, rest = key[0], key[1:]
    if head == "*":
        for item in node if isinstance(node, list) else ():
            _drop_path(item, rest)
    elif isinstance(node, dict) and head in node:
        if rest:
            _drop_path(node[head], rest)
        else:
            node.pop(head)


def _toml_literal(v) -> str:
    """A value as the TOML literal the form's editor shows and reads back (values())."""
    if isinstance(v, BaseModel):
        v = v.model_dump()
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_literal(x)}" for k, x in v.items()) + "}"
    if isinstance(v, tuple | list):
        return "[" + ", ".join(_toml_literal(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string (quotes and backslashes escaped)
    return repr(v)


class MainWindow(QtWidgets.QMainWindow):
    # cap on new frames drawn (and published) per second: every draw holds the GIL the simulation
    # thread needs, so more frames cost steps; set_frame_cap changes it, up to the display's rate
    max_fps = DEFAULT_FPS

    def __init__(self, preset: str | None = None, backend: str = "auto", output_dir: str | Path | None = None,
                 start_running: bool = True, hud: bool = True, fps: float | None = None):
        super().__init__()
        self.max_fps = min(float(fps or DEFAULT_FPS), self.refresh_rate())
        self.setWindowTitle("nagare")
        self.resize(1400, 860)
        self.output_dir = Path(output_dir or Path.cwd() / "nagare-output")
        self.backend = get_backend(backend)
        self.recorder: export.VideoRecorder | None = None
        self.messages: list[str] = []
        self.last_error_box: QtWidgets.QMessageBox | None = None
        self.variant_info: dict = {}
        # while a new preset is built: the variant table of the engine still loaded, put aside (its
        # controls are gone; back if the build fails); None: no build under way
        self._variants_held: dict | None = None
        self._building_preset = None  # the preset whose engine is awaited (while building)
        self._last_seq = -1
        self._recorded_seq = -1  # the last packet put into the video
        self._pending_ckpt_path: Path | None = None
        self._pacer = FramePacer(self.max_fps, poll_interval(self.max_fps))  # when the next new frame may be drawn
        self._range_shown_for = (None, None)  # (packet, range) the range boxes show
        self._t_status = 0.0  # ... and of the last status-bar update
        self._result_callbacks: dict = {}  # "call" tag → callback(result), see _call
        self._notice_handlers = {
            "engine": self._on_engine, "variant": self._on_variant, "diverged": self._on_diverged,
            "error": self._on_error, "checkpoint": self._on_checkpoint, "result": self._on_result,
            "progress": self._on_progress,
            "preset-kept": self._on_preset_kept, "speed": self._on_speed,
        }
        # a preset switch: the run id the window gave the new build; packets of earlier runs are not
        # drawn until its first one (None: no switch under way)
        self._loading_run: int | None = None
        self._last_run = 0  # the highest run id seen in a packet (new ids are above it)

        self.canvas = FieldCanvas()
        self.canvas.set_backend(self.backend.name)
        self.canvas.create_native()
        self.canvas.native.setParent(self)
        self.setCentralWidget(self.canvas.native)
        self.hud = Hud(self.canvas, self._hud_model, self.set_variant)
        self.hud.visible = hud
        self.canvas.hud = self.hud
        self.canvas.relayout()
        self.probes = Probes(self.canvas, self.hud, self.message)
        self.slice_drag = SliceDrag(self.canvas, moved=self._plane_dragged)  # 3D: drag a slice plane
        self.wheel_zoom = WheelZoom(self.canvas)  # the wheel zooms about the pointer (3D; 2D: VisPy)

        self.preset = load_preset(preset or default_preset_name(), backend=self.backend.name)
        self.worker = SimulationWorker(self.preset, self.backend.name, display_interval=1 / self.max_fps).start()
        self.hud.quantity_source = self._hud_quantities  # the engine's logged quantities (C_d, ...)
        self._build_docks()
        self._build_actions()
        # a focused list, line edit, spin box or combo takes bare printable keys, not the shortcuts
        self._typing_guard = TypingGuard(self)
        QtWidgets.QApplication.instance().installEventFilter(self._typing_guard)
        # long tooltips (parameters, variants, presets) shown wrapped, not ~1400 px across
        self._tooltip_wrapper = TooltipWrapper(self)
        QtWidgets.QApplication.instance().installEventFilter(self._tooltip_wrapper)
        self._build_status()
        self._apply_preset_to_ui(self.preset)
        if fps and fps > self.max_fps:
            self.message(f"frame cap {fps:g} frames/s is above the display's refresh rate: {self.max_fps:g}")
        if start_running:
            self.worker.send("play")

        self.timer = QtCore.QTimer(self)
        self.timer.timeout.connect(self._tick)
        self.timer.start(max(1, int(round(poll_interval(self.max_fps) * 1000))))

    # ---- layout ------------------------------------------------------------------------
    def _dock(self, title: str, widget: QtWidgets.QWidget, area=Qt.DockWidgetArea.LeftDockWidgetArea):
        d = QtWidgets.QDockWidget(title, self)
        d.setObjectName(title)
        d.setWidget(widget)
        self.addDockWidget(area, d)
        return d

    def _build_docks(self) -> None:
        # preset picker
        w = QtWidgets.QWidget()
        lay = QtWidgets.QVBoxLayout(w)
        self.preset_list = QtWidgets.QListWidget()
        for name in preset_names():
            # on NumPy, [cpu_overrides] change what runs: the list says so ("diffusion3d — 64³ on CPU")
            item = QtWidgets.QListWidgetItem(name)
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setToolTip(name)
            try:
                raw = presetinfo.raw_preset(name)
                note = presetinfo.cpu_note(raw) if self.backend.name == "numpy" else ""
                if note:
                    item.setText(f"{name} — {note}")
                # the whole row too: a narrow dock cuts "amr3d-ahmed — on CPU: grid.m = 96, …" short
                item.setToolTip(f"{item.text()}\n\n{presetinfo.describe(raw, self.backend.name)}")
            except Exception:
                pass
            self.preset_list.addItem(item)
        self.preset_list.itemActivated.connect(lambda it: self.open_preset(it.data(Qt.ItemDataRole.UserRole)))
        lay.addWidget(self.preset_list)
        row = QtWidgets.QHBoxLayout()
        b_load = QtWidgets.QPushButton("Load")
        b_load.clicked.connect(lambda: self.preset_list.currentItem() and
                               self.open_preset(self.preset_list.currentItem().data(Qt.ItemDataRole.UserRole)))
        b_open = QtWidgets.QPushButton("Open TOML…")
        b_open.clicked.connect(self._open_dialog)
        row.addWidget(b_load)
        row.addWidget(b_open)
        lay.addLayout(row)
        self.preset_desc = QtWidgets.QLabel()
        self.preset_desc.setWordWrap(True)
        lay.addWidget(self.preset_desc)
        self.preset_dock = self._dock("Presets", w)

        self.params = ParameterForm()
        self.params.apply_button.clicked.connect(self.apply_parameters)
        self.params_dock = self._dock("Parameters", self.params)

        self.variants_host = QtWidgets.QWidget()
        self.variants_form = QtWidgets.QFormLayout(self.variants_host)
        self.variant_combos: dict[str, QtWidgets.QComboBox] = {}
        self.variants_dock = self._dock("Variants", self.variants_host, Qt.DockWidgetArea.RightDockWidgetArea)

        # view
        v = QtWidgets.QWidget()
        f = QtWidgets.QFormLayout(v)
        self.field_combo = QtWidgets.QComboBox()
        self.field_combo.activated.connect(lambda i: self.show_field(i))
        f.addRow("field", self.field_combo)
        self.component_combo = QtWidgets.QComboBox()
        self.component_combo.addItems(["magnitude", "x", "y", "z"])
        self.component_combo.currentTextChanged.connect(lambda t: self.worker.send("view", component=t))
        self.component_combo.setToolTip("what of a vector field is drawn")
        f.addRow("component", self.component_combo)
        f.setRowVisible(self.component_combo, False)  # shown for vector fields only (_tick)
        self.view_form = f
        self.attr_combo = QtWidgets.QComboBox()
        self.attr_combo.setToolTip("particle attribute that sets the colour")
        self.attr_combo.activated.connect(lambda i: self.worker.send("view", attribute=self.attr_combo.itemText(i)))
        f.addRow("colour by", self.attr_combo)
        self.cmap_combo = QtWidgets.QComboBox()
        self.cmap_combo.addItems(colormaps.NAMES)
        self.cmap_combo.currentTextChanged.connect(self.canvas.set_colormap)
        f.addRow("colormap", self.cmap_combo)
        self.auto_range = QtWidgets.QCheckBox("auto")
        self.auto_range.setChecked(True)
        self.range_lo = QtWidgets.QLineEdit("0")
        self.range_hi = QtWidgets.QLineEdit("1")
        for wdg in (self.auto_range,):
            wdg.toggled.connect(self._range_changed)
        for wdg in (self.range_lo, self.range_hi):
            wdg.editingFinished.connect(self._range_changed)
        rr = QtWidgets.QHBoxLayout()
        rr.addWidget(self.auto_range)
        rr.addWidget(self.range_lo)
        rr.addWidget(self.range_hi)
        f.addRow("range", rr)
        self.slice_axis = QtWidgets.QComboBox()
        self.slice_axis.addItems(["z", "y", "x"])
        self.slice_axis.currentTextChanged.connect(lambda t: self.worker.send("view", slice_axis=t))
        f.addRow("slice axis", self.slice_axis)
        self.slice_slider = QtWidgets.QSlider(Qt.Orientation.Horizontal)
        self.slice_slider.setRange(0, 1000)
        self.slice_slider.setValue(500)
        self.slice_slider.valueChanged.connect(lambda val: self.worker.send("view", slice_pos=val / 1000))
        f.addRow("slice", self.slice_slider)
        self.obstacles = QtWidgets.QCheckBox("obstacles")
        self.obstacles.setChecked(True)
        self.obstacles.toggled.connect(self._overlay_changed)
        self.particles_overlay = QtWidgets.QCheckBox("particles over grids")
        self.particles_overlay.setChecked(True)
        self.particles_overlay.toggled.connect(lambda on: self.worker.send("view", particles_overlay=on))
        ov = QtWidgets.QHBoxLayout()
        ov.addWidget(self.obstacles)
        ov.addWidget(self.particles_overlay)
        f.addRow("overlays", ov)
        self.colorbar_box = QtWidgets.QCheckBox("colour bar")
        self.colorbar_box.setChecked(True)
        self.colorbar_box.toggled.connect(self.canvas.set_colorbar)
        self.colorbar_export = QtWidgets.QCheckBox("in exports")
        self.colorbar_export.setToolTip("draw the colour bar in PNG frames and MP4 videos")
        self.colorbar_export.setChecked(True)
        self.colorbar_export.toggled.connect(lambda on: setattr(self.canvas, "colorbar_in_exports", on))
        cbr = QtWidgets.QHBoxLayout()
        cbr.addWidget(self.colorbar_box)
        cbr.addWidget(self.colorbar_export)
        f.addRow("legend", cbr)
        self.tracer_spin = QtWidgets.QSpinBox()
        self.tracer_spin.setRange(1, 100_000)
        self.tracer_spin.setEnabled(False)
        self.tracer_spin.setToolTip("tracers kept per seed point, live (engines with adjustable tracers: amr3d)")
        self.tracer_spin.setKeyboardTracking(False)  # typed digits apply on Enter or leaving; arrows at once
        self.tracer_spin.valueChanged.connect(self._tracer_count_changed)
        self._tracer_capacity = None  # what the engine holds (the last answer)
        f.addRow("tracers per seed", self.tracer_spin)
        self.view_dock = self._dock("View", v, Qt.DockWidgetArea.RightDockWidgetArea)
        self._build_view3d_dock()

        # export
        e = QtWidgets.QWidget()
        el = QtWidgets.QVBoxLayout(e)
        self.out_edit = QtWidgets.QLineEdit(str(self.output_dir))
        self.out_edit.editingFinished.connect(lambda: setattr(self, "output_dir", Path(self.out_edit.text())))
        el.addWidget(QtWidgets.QLabel("output folder"))
        el.addWidget(self.out_edit)
        self.hud_export = QtWidgets.QCheckBox("HUD in PNG/MP4")
        self.hud_export.setToolTip("draw the HUD into screenshots and videos as on screen; off: the scene alone, "
                                   "framed as in the window, without the HUD's column")
        self.hud_export.toggled.connect(lambda on: setattr(self.canvas, "hud_in_exports", on))
        el.addWidget(self.hud_export)
        vrow = QtWidgets.QHBoxLayout()
        vrow.addWidget(QtWidgets.QLabel("video frames/s"))
        self.video_fps = QtWidgets.QSpinBox()
        self.video_fps.setRange(1, 240)
        self.video_fps.setValue(export.DEFAULT_VIDEO_FPS)
        self.video_fps.setToolTip("the MP4's playback rate: the video holds one frame per frame the simulation "
                                  "published while recording, played at this rate")
        vrow.addWidget(self.video_fps)
        el.addLayout(vrow)
        for label, fn in (("Screenshot PNG (S)", self.screenshot), ("Record MP4 (V)", self.toggle_recording),
                          ("Timing log CSV+JSON", self.export_timings),
                          ("Fields → ParaView (VTKHDF)", self.export_vtkhdf), ("Fields → legacy VTK", self.export_vtk),
                          ("Save checkpoint", self.save_checkpoint), ("Load checkpoint…", self._load_ckpt_dialog),
                          ("Restore last good state", self.restore_last_good)):
            b = QtWidgets.QPushButton(label)
            b.clicked.connect(lambda _=False, fn=fn: fn())
            el.addWidget(b)
            if label.startswith("Record"):
                self.record_button = b
        el.addStretch(1)
        self.export_dock = self._dock("Export", e, Qt.DockWidgetArea.RightDockWidgetArea)
        self.tabifyDockWidget(self.view_dock, self.view3d_dock)
        self.tabifyDockWidget(self.view_dock, self.export_dock)
        self.view_dock.raise_()
        self.resizeDocks([self.preset_dock, self.variants_dock], [260, 300], Qt.Orientation.Horizontal)
        self.resizeDocks([self.preset_dock, self.params_dock], [220, 500], Qt.Orientation.Vertical)

    def _build_actions(self) -> None:
        mb = self.menuBar()
        filem = mb.addMenu("&File")
        runm = mb.addMenu("&Run")
        viewm = mb.addMenu("&View")
        helpm = mb.addMenu("&Help")

        def act(menu, text, key, fn):
            a = QtGui.QAction(text, self)
            if key:
                a.setShortcut(QtGui.QKeySequence(key))
                a.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)
            a.triggered.connect(lambda _=False: fn())
            menu.addAction(a)
            return a

        act(filem, "Open preset…", "Ctrl+O", self._open_dialog)
        act(filem, "Save checkpoint", "Ctrl+S", self.save_checkpoint)
        act(filem, "Load checkpoint…", "Ctrl+L", self._load_ckpt_dialog)
        act(filem, "Export fields (ParaView VTKHDF)", "Ctrl+E", self.export_vtkhdf)
        act(filem, "Export fields (legacy VTK)", "", self.export_vtk)
        act(filem, "Export timing log", "", self.export_timings)
        act(filem, "Quit", "Ctrl+Q", self.close)
        act(runm, "Play / pause", "Space", lambda: self.worker.send("toggle"))
        act(runm, "Single step", "N", lambda: self.worker.send("step", n=1))
        act(runm, "Reset", "R", lambda: self.worker.send("reset"))
        act(runm, "Restore last good state", "", self.restore_last_good)
        self._build_speed_menu(runm.addMenu("Speed"))
        act(viewm, "Screenshot", "S", self.screenshot)
        act(viewm, "Record video", "V", self.toggle_recording)
        act(viewm, "HUD", "F1", self.toggle_hud)
        act(viewm, "Reset camera", "Home", self.canvas.reset_camera)
        self._build_frame_cap_menu(viewm.addMenu("Frame cap"))
        act(viewm, "Colour bar", "B", lambda: self.colorbar_box.setChecked(not self.colorbar_box.isChecked()))
        act(viewm, "Clear probes", "Esc", self.probes.clear)
        act(viewm, "Slice up", "PgUp", lambda: self.slice_slider.setValue(self.slice_slider.value() + 20))
        act(viewm, "Slice down", "PgDown", lambda: self.slice_slider.setValue(self.slice_slider.value() - 20))
        for i in range(9):
            act(viewm, f"Field {i + 1}", str(i + 1), lambda i=i: self.show_field(i))
        act(helpm, "Keys", "H", self.show_help)

    def refresh_rate(self) -> float:
        """The display's refresh rate in Hz (the highest frame cap that shows every frame drawn);
        60 where the screen does not say (some virtual displays report 0)."""
        screen = self.screen() or QtGui.QGuiApplication.primaryScreen()
        rate = screen.refreshRate() if screen is not None else 0.0
        return float(rate) if rate > 1 else 60.0

    def _build_frame_cap_menu(self, menu: QtWidgets.QMenu) -> None:
        self.fps_actions: dict[float, QtGui.QAction] = {}
        group = QtGui.QActionGroup(self)
        limit = self.refresh_rate()
        caps = sorted({float(c) for c in FPS_CHOICES if c <= limit} | {self.max_fps, limit})
        for cap in caps:
            a = QtGui.QAction(f"{cap:g} frames/s" + (" (display refresh)" if cap == limit else ""), self)
            a.setCheckable(True)
            a.setChecked(cap == self.max_fps)
            a.triggered.connect(lambda _=False, cap=cap: self.set_frame_cap(cap))
            group.addAction(a)
            menu.addAction(a)
            self.fps_actions[cap] = a

    def _build_speed_menu(self, menu: QtWidgets.QMenu) -> None:
        """As fast as the run goes (frames at the cap), or a fixed number of steps a frame: the
        preset's run.steps_per_frame and a few decades (the worker's frame_steps)."""
        self.speed_menu = menu
        menu.aboutToShow.connect(self._fill_speed_menu)
        self._fill_speed_menu()

    def _fill_speed_menu(self) -> None:
        menu = self.speed_menu
        menu.clear()
        if getattr(self, "_speed_group", None) is not None:
            self._speed_group.deleteLater()  # menu.clear() deletes the actions, not their group
        group = self._speed_group = QtGui.QActionGroup(menu)
        preset = getattr(self, "preset", None)
        preset_n = preset.run.steps_per_frame if preset is not None else None
        current = self.worker.frame_steps
        choices = [None] + sorted({1, 10, 100, 1000} | ({preset_n} if preset_n else set()) |
                                  ({current} if current else set()))
        self.speed_actions: dict = {}
        for n in choices:
            text = ("As fast as it runs (frames at the cap)" if n is None
                    else f"{n} step{'s' if n != 1 else ''} a frame" + (" (the preset's)" if n == preset_n else ""))
            a = QtGui.QAction(text, menu)
            a.setCheckable(True)
            a.setChecked(n == current)
            a.triggered.connect(lambda _=False, n=n: self.set_speed(n))
            group.addAction(a)
            menu.addAction(a)
            self.speed_actions[n] = a

    def set_speed(self, steps: int | None) -> None:
        """Run at ``steps`` steps a frame (at most the frame cap's frames a second), or as fast as it
        goes (None)."""
        self.worker.send("speed", steps=steps)

    def _on_speed(self, n) -> None:
        steps = n.payload
        for k, a in getattr(self, "speed_actions", {}).items():
            a.setChecked(k == steps)
        plural = "s" if steps != 1 else ""
        self.message("speed: as fast as it runs" if steps is None else
                     f"speed: {steps} step{plural} a frame, at most {steps * self.max_fps:g} steps/s")

    def set_frame_cap(self, fps: float) -> float:
        """At most ``fps`` new frames a second on screen (and published by the worker), clamped to
        1 … the display's refresh rate; returns the cap in force."""
        fps = min(max(float(fps), 1.0), self.refresh_rate())
        self.max_fps = fps
        self._pacer = FramePacer(fps, poll_interval(fps))
        if getattr(self, "timer", None) is not None:
            self.timer.setInterval(max(1, int(round(poll_interval(fps) * 1000))))
        self.worker.display_interval = 1.0 / fps  # a float the worker reads before each publish
        for cap, a in getattr(self, "fps_actions", {}).items():
            a.setChecked(cap == fps)
        self.message(f"frame cap: {fps:g} frames/s (display refresh {self.refresh_rate():g} Hz)")
        return fps

    def _build_status(self) -> None:
        sb = self.statusBar()
        # what a preset switch is doing (building the tree, compiling kernels), beside the messages
        self.progress_bar = QtWidgets.QProgressBar()
        self.progress_bar.setMinimumWidth(220)
        self.progress_bar.setMaximumWidth(320)
        self.progress_bar.setTextVisible(True)
        self.progress_bar.hide()
        sb.addWidget(self.progress_bar)
        self._progress_idle = QtCore.QTimer(self)  # hides the bar once the reports stop
        self._progress_idle.setSingleShot(True)
        self._progress_idle.timeout.connect(self.progress_bar.hide)
        # over the cleared canvas while a preset is built
        self.loading_label = QtWidgets.QLabel(self.canvas.native)
        self.loading_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.loading_label.setStyleSheet("QLabel { background: rgba(30, 30, 36, 220); color: #e8e8e8; "
                                         "padding: 14px; border-radius: 6px; font-size: 14px; }")
        self.loading_label.hide()
        self.status_labels = {}
        for key in ("state", "backend", "device", "time", "steps", "throughput", "roofline", "display"):
            lab = QtWidgets.QLabel("")
            lab.setContentsMargins(6, 0, 6, 0)
            sb.addPermanentWidget(lab)
            self.status_labels[key] = lab
        self.status_labels["backend"].setText(f"backend: {self.backend.name}")
        try:
            dev = self.backend.device_info().name
        except Exception:
            dev = "?"
        self.status_labels["device"].setText(f"device: {dev}")
        sb.messageChanged.connect(self._status_message_changed)

    # ---- presets & parameters ---------------------------------------------------------
    def _apply_preset_to_ui(self, preset) -> None:
        self.preset = preset
        self.setWindowTitle(f"nagare — {Path(preset.source).stem}")
        self.preset_desc.setText(presetinfo.describe(raw_dict(preset), self.backend.name))
        self.params.load(preset)
        self.cmap_combo.setCurrentText(preset.view.colormap)
        self.canvas.set_colormap(preset.view.colormap)
        self.auto_range.setChecked(preset.view.range is None)
        if preset.view.range is not None:
            self.range_lo.setText(repr(preset.view.range[0]))
            self.range_hi.setText(repr(preset.view.range[1]))
        self._range_changed()
        self.slice_axis.setCurrentText(preset.view.slice_axis)
        planes = preset.view.planes
        for axis, box in self.plane_boxes.items():
            box.setChecked(planes is None or axis in planes)
        self.leaves_box.setChecked(preset.view.leaves)
        self.particles_overlay.setChecked(preset.view.particles_overlay)

    def open_preset(self, name_or_path: str | Path) -> bool:
        """Validate first; only a valid preset replaces the running simulation."""
        try:
            preset = load_preset(name_or_path, backend=self.backend.name)
        except NagareError as exc:
            self.error("Cannot open preset", str(exc))
            return False
        run = self._begin_loading(preset)
        self.worker.send("preset", preset=preset, view={"field": preset.view.field}, run=run, play=True)
        self._apply_preset_to_ui(preset)
        return True

    # ---- a preset being built -------------------------------------------------------------
    def _begin_loading(self, preset) -> int:
        """Clear the old picture at once and say what is happening until the new run's first frame
        is drawn (the worker's "progress" notices fill in the stages); returns the run id the new
        build is to carry."""
        self._loading_run = max(self._last_run, self._loading_run or 0) + 1
        self._loading_name = Path(preset.source).stem
        self._building_preset = preset
        self.canvas.clear_scene()
        self._hold_variants()
        self.probes.clear()
        self._show_progress(f"building {preset.engine}: {Path(preset.source).stem}", 0.0)
        return self._loading_run

    def _on_progress(self, n) -> None:
        self._show_progress(n.text, n.payload)

    def _show_progress(self, stage: str, fraction: float | None) -> None:
        bar = self.progress_bar
        if fraction is None:
            bar.setRange(0, 0)  # busy: no share known (a kernel compiling)
        else:
            bar.setRange(0, 100)
            bar.setValue(int(round(100 * fraction)))
        bar.setFormat(stage if fraction is None else f"{stage}  %p%")
        bar.setToolTip(stage)
        bar.show()
        self._progress_idle.start(2000)
        if self._loading_run is not None:  # still no picture of the new run: say it over the canvas
            self.loading_label.setText(f"{self._loading_name}\n{stage}")
            self.loading_label.adjustSize()
            (x, y), (fw, fh) = self.canvas.view.pos, self.canvas.view.size  # the field's area, beside the HUD
            lw, lh = self.loading_label.width(), self.loading_label.height()
            cw = self.canvas.native.width()  # inside the canvas where the field's area is narrower
            self.loading_label.move(max(0, min(int(x + fw / 2) - lw // 2, cw - lw)), int(y + fh / 2) - lh // 2)
            self.loading_label.show()
            self.loading_label.raise_()

    def _end_loading(self) -> None:
        self._loading_run = None
        self.loading_label.hide()

    def _open_dialog(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open preset", str(PRESET_DIR), "Presets (*.toml)")
        if path:
            self.open_preset(path)

    def apply_parameters(self) -> bool:
        try:
            preset = validate(self.params.values(), self.preset.source, self.backend.name)
        except PresetError as exc:
            self.error("Invalid parameter", str(self._blame_form(exc)))
            return False
        except NagareError as exc:
            self.error("Invalid parameter", str(exc))
            return False
        run = self._begin_loading(preset)
        self.worker.send("preset", preset=preset, variants=None, run=run, play=True)
        self._apply_preset_to_ui(preset)
        return True

    def _blame_form(self, exc: PresetError) -> PresetError:
        """A refusal of what the Parameters form gives names the form (and focuses the field),
        not the preset file: the file was valid when loaded, the value was typed here."""
        if exc.source != self.preset.source:
            return exc
        key = exc.key or ""
        bare = key.removeprefix("cpu_overrides.")
        editor = self.params.editors.get(tuple(bare.split("."))) if bare else None
        if editor is not None:
            editor[0].setFocus()
        return PresetError(f"Parameters form (applied to {self.preset.source})", exc.key, exc.given, exc.allowed)

    # ---- variants ----------------------------------------------------------------------
    @property
    def building(self) -> bool:
        """A new preset's engine is being built (from _begin_loading until its "engine" notice, or
        the notice that the old run was kept)."""
        return self._variants_held is not None

    def set_variant(self, axis: str, choice: str) -> None:
        if self.building:
            # the worker would apply it after the build, to the new engine (or fail on an axis it
            # lacks): nothing is sent while the engine the choice was made for is going away
            self.message(f"variant {axis} = {choice} not switched: {self._loading_name} is being built "
                         f"(its variants come when it is loaded)")
            return
        self.worker.send("variant", axis=axis, choice=choice)

    def _hold_variants(self) -> None:
        """A new engine is being built: the HUD's quick toggles and the Variants dock lose the old
        engine's choices at once (the dock says why); its table is kept aside for a failed build."""
        if self._variants_held is None:
            self._variants_held = self.variant_info
        self._rebuild_variants({})
        note = QtWidgets.QLabel(f"building {self._loading_name}:\nits variants come when it is loaded")
        note.setEnabled(False)
        self.variants_form.addRow(note)
        self.variants_host.setEnabled(False)

    def _release_variants(self, variants: dict) -> None:
        """The build is over: the controls for ``variants`` (the new engine's, or the kept run's)."""
        self._variants_held = None
        self.variants_host.setEnabled(True)
        self._rebuild_variants(variants)

    def _rebuild_variants(self, variants: dict) -> None:
        """variants: the engine's variant table (a copy the worker sent). Axes with another choice
        to switch to come first; axes whose every other choice is unavailable here (GPU kernels on
        the NumPy backend) follow under one line that says why, their boxes greyed, so the dock
        leads with what can be switched."""
        self.variant_info = variants
        while self.variants_form.rowCount():
            self.variants_form.removeRow(0)
        self.variant_combos.clear()
        fixed = {axis for axis, info in variants.items() if _only_current_available(info)}
        for axis, info in variants.items():
            if axis not in fixed:
                self._add_variant_row(axis, info)
        if fixed:
            reasons = {r for axis in fixed for c, r in variants[axis]["choices"].items() if r}
            why = reasons.pop() if len(reasons) == 1 else "no other choice of theirs runs; hover for why"
            note = QtWidgets.QLabel(f"fixed here ({why}):")
            note.setWordWrap(True)
            note.setEnabled(False)
            self.variants_form.addRow(note)
            for axis in variants:
                if axis in fixed:
                    self._add_variant_row(axis, variants[axis]).setEnabled(False)

    def _add_variant_row(self, axis: str, info: dict) -> QtWidgets.QComboBox:
        cb = QtWidgets.QComboBox()
        model = cb.model()
        for i, (choice, reason) in enumerate(info["choices"].items()):
            cb.addItem(choice)
            tip = choice_tooltip(info, choice)
            cb.setItemData(i, tip, Qt.ItemDataRole.ToolTipRole)
            if reason:
                item = model.item(i)
                item.setEnabled(False)
                item.setToolTip(tip)
        cb.setCurrentText(info["current"])
        axis_tip = f"{axis}: {info['doc']}" + ("" if info["live"] else "  (switching resets the run)")
        cb.setToolTip(axis_tip)
        cb.activated.connect(lambda i, axis=axis, cb=cb: self.set_variant(axis, cb.itemText(i)))
        label = axis if info["live"] else f"{axis} (resets)"
        self.variants_form.addRow(label, cb)
        self.variants_form.labelForField(cb).setToolTip(axis_tip)
        self.variant_combos[axis] = cb
        return cb

    def _variant_changed(self, selection: dict) -> None:
        # a switch the old engine made before the build began goes into its table put aside too
        tables = [self.variant_info] + ([self._variants_held] if self.building else [])
        for axis, choice in selection.items():
            for table in tables:
                if axis in table:
                    table[axis]["current"] = choice
            cb = self.variant_combos.get(axis)
            if cb is not None:
                cb.setCurrentText(choice)

    # ---- view --------------------------------------------------------------------------
    def show_field(self, index: int) -> None:
        if 0 <= index < self.field_combo.count():
            self.field_combo.setCurrentIndex(index)
            self.worker.send("view", field=self.field_combo.itemText(index))

    def _range_changed(self) -> None:
        if self.auto_range.isChecked():
            self.canvas.set_range(None)
            self._show_auto_range()  # read-only at once; the values follow the next drawn frame
            return
        try:
            lo, hi = float(self.range_lo.text()), float(self.range_hi.text())
        except ValueError:
            self.message("range: enter two numbers")
            return
        if hi <= lo:
            self.message("range: the upper bound must exceed the lower")
            return
        self.canvas.set_range((lo, hi))

    def _show_auto_range(self) -> None:
        """With "auto" ticked the range boxes show the range in use (read-only), so unticking starts
        from it instead of from stale numbers."""
        auto = self.auto_range.isChecked()
        self.range_lo.setReadOnly(auto)
        self.range_hi.setReadOnly(auto)
        rng = getattr(self.canvas, "current_range", None)
        if auto and rng is not None:
            lo, hi = (float(v) for v in rng)
            for edit, v in ((self.range_lo, lo), (self.range_hi, hi)):
                text = f"{v:.4g}"
                if edit.text() != text:
                    edit.setText(text)

    def _overlay_changed(self) -> None:
        self.canvas.set_show_obstacles(self.obstacles.isChecked())

    def toggle_hud(self) -> None:
        self.hud.visible = not self.hud.visible
        self.canvas.relayout()  # the field takes the HUD's column back (or leaves it again)
        self.canvas.update()

    # ---- the 3D view dock --------------------------------------------------------------
    def _build_view3d_dock(self) -> None:
        w = QtWidgets.QWidget()
        f = QtWidgets.QFormLayout(w)
        self.mode_combo = QtWidgets.QComboBox()
        self.mode_combo.addItems(["3d", "slice"])
        self.mode_combo.setToolTip("3D grids: the volume in 3D (slice planes, volume rendering) or one 2D slice")
        self.mode_combo.currentTextChanged.connect(lambda t: self.worker.send("view", mode=t))
        f.addRow("3D grids", self.mode_combo)
        self.plane_boxes, self.plane_sliders = {}, {}
        for axis in ("x", "y", "z"):
            box = QtWidgets.QCheckBox(axis)
            box.setChecked(True)
            sl = QtWidgets.QSlider(Qt.Orientation.Horizontal)
            sl.setRange(0, 1000)
            sl.setValue(500)
            box.toggled.connect(lambda on, a=axis: self._plane_changed(a))
            sl.valueChanged.connect(lambda _v, a=axis: self._plane_changed(a))
            row = QtWidgets.QHBoxLayout()
            row.addWidget(box)
            row.addWidget(sl, 1)
            f.addRow(f"{axis} plane", row)
            self.plane_boxes[axis], self.plane_sliders[axis] = box, sl
        self.volume_combo = QtWidgets.QComboBox()
        self.volume_combo.addItems(["off", "mip", "translucent"])
        self.volume_combo.currentTextChanged.connect(lambda t: self.canvas.set_view3d(volume=t))
        f.addRow("volume", self.volume_combo)
        self.window_lo = QtWidgets.QSlider(Qt.Orientation.Horizontal)
        self.window_hi = QtWidgets.QSlider(Qt.Orientation.Horizontal)
        for sl, val in ((self.window_lo, 0), (self.window_hi, 1000)):
            sl.setRange(0, 1000)
            sl.setValue(val)
            sl.valueChanged.connect(self._window_changed)
        self.window_lo.setToolTip("transfer function: the lower end, as a fraction of the colour range")
        self.window_hi.setToolTip("transfer function: the upper end, as a fraction of the colour range")
        f.addRow("volume from", self.window_lo)
        f.addRow("volume to", self.window_hi)
        self.outline_box = QtWidgets.QCheckBox("box and axes")
        self.outline_box.setChecked(True)
        self.outline_box.toggled.connect(lambda on: self.canvas.set_view3d(outline=on))
        self.leaves_box = QtWidgets.QCheckBox("octree leaves")
        self.leaves_box.setChecked(True)
        self.leaves_box.toggled.connect(self._leaves_changed)
        self.walls_box = QtWidgets.QCheckBox("wall particles")
        self.walls_box.setToolTip("3D particles: draw the wall and obstacle particles too (else outlines and surfaces)")
        self.walls_box.toggled.connect(lambda on: self.worker.send("view", hide_walls=not on))
        for b in (self.outline_box, self.leaves_box, self.walls_box):
            f.addRow("", b)
        reset = QtWidgets.QPushButton("Reset camera (Home)")
        reset.clicked.connect(self.canvas.reset_camera)
        f.addRow(reset)
        self.view3d_dock = self._dock("3D", w, Qt.DockWidgetArea.RightDockWidgetArea)

    def _enable_view3d(self, on: bool) -> None:
        """The 3D dock's controls act on 3D views only: off (greyed, saying why) for a 2D preset."""
        page = self.view3d_dock.widget()
        if page.isEnabled() != on:
            page.setEnabled(on)
            page.setToolTip("" if on else "3D views only: this preset's fields are 2D")

    def _plane_changed(self, axis: str) -> None:
        self.canvas.set_view3d(planes={axis: [self.plane_boxes[axis].isChecked(),
                                              self.plane_sliders[axis].value() / 1000]})

    def _plane_dragged(self, axis: str, frac: float) -> None:
        """A plane dragged in the 3D view: its slider follows (without sending the value back)."""
        sl = self.plane_sliders[axis]
        sl.blockSignals(True)
        sl.setValue(int(round(frac * 1000)))
        sl.blockSignals(False)

    def _window_changed(self) -> None:
        self.canvas.set_view3d(window=(self.window_lo.value() / 1000, self.window_hi.value() / 1000))

    def _leaves_changed(self, on: bool) -> None:
        self.canvas.set_view3d(boxes=on)
        self.worker.send("view", boxes_overlay=on)

    def show_help(self) -> None:
        box = QtWidgets.QMessageBox(self)
        box.setWindowTitle("nagare — keys")
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setText(KEYS_HELP)
        box.setModal(False)
        box.show()
        self.help_box = box

    def _hud_model(self):
        if self.building:  # the old engine's timings and status are not the new one's
            return [], self.variant_info, f"building {self._loading_name}"
        st = self.worker.latest_stats()
        state = "running" if self.worker.running else ("DIVERGED" if self.worker.diverged else "paused")
        shown = self.canvas.shown_time()
        step = self._shown_step(st)
        # the HUD is drawn with each new frame, the status line refreshed at 5 Hz: without this the
        # status line showed a frame or two before the HUD's (step 6191 beside the HUD's 6256)
        self._show_frame_labels(step, st, shown)
        status = (f"{state} · step {step} · {st.steps_per_s if st else 0:.0f} steps/s"
                  + (f"\n{shown} (frame on screen)" if shown else ""))
        return list(self.worker.history), self.variant_info, status

    # ---- the UI tick -------------------------------------------------------------------
    def _tick(self) -> None:
        for n in self.worker.drain_notices():
            self._notice(n)
        drawn = (self.canvas.shown, getattr(self.canvas, "current_range", None))
        if drawn[0] is not self._range_shown_for[0] or drawn[1] != self._range_shown_for[1]:
            # the range boxes follow what the canvas has drawn (show_packet only queues a packet:
            # reading the range right after it showed the previous frame's)
            self._range_shown_for = drawn
            self._show_auto_range()
        if self.recorder is not None:
            self._record_published()
        pk = self.worker.next_packet(self._last_seq)
        if pk is not None:
            self._last_run = max(self._last_run, pk.run)
        if pk is not None and self._loading_run is not None:
            if pk.run < self._loading_run:
                pk = None  # the replaced run's frame: the canvas stays clear
            else:
                self._end_loading()
        now = time.perf_counter()
        # At most max_fps new frames a second: every draw holds the GIL the simulation thread
        # needs to launch its kernels. Without a new packet nothing is redrawn at all.
        if pk is not None and self._pacer.due(now):
            self._pacer.drawn(now)
            self._last_seq = pk.seq
            if list(pk.fields) != [self.field_combo.itemText(i) for i in range(self.field_combo.count())]:
                self.field_combo.clear()
                self.field_combo.addItems(pk.fields)
            self.field_combo.setCurrentText(pk.field_name)
            # a scalar (vorticity, u, φ) is drawn as it is: "component: magnitude" beside it was wrong
            self.view_form.setRowVisible(self.component_combo, bool(pk.vector))
            if list(pk.attributes) != [self.attr_combo.itemText(i) for i in range(self.attr_combo.count())]:
                self.attr_combo.clear()
                self.attr_combo.addItems(pk.attributes)
            if pk.attribute:
                self.attr_combo.setCurrentText(pk.attribute)
            self.attr_combo.setEnabled(bool(pk.attributes))
            self._enable_view3d(packet_is_3d(pk))
            self.canvas.show_packet(pk)  # uploaded (and its range known) at the canvas' next draw
        now = time.perf_counter()
        if now - self._t_status > 0.2:  # 5 Hz is plenty; the GIL is shared with the worker
            self._t_status = now
            self._update_status()

    def _notice(self, n) -> None:
        handler = self._notice_handlers.get(n.kind)
        if handler is None:  # info and any kind without a handler: a status-bar line
            self.message(n.text)
        else:
            handler(n)

    def _hud_quantities(self):
        """The worker's logged quantities for the HUD; none while a new engine is built (a run id
        no run has: the old run's history goes)."""
        return (-1, []) if self.building else self.worker.quantities()

    def _on_engine(self, n) -> None:
        if self.building and n.preset is not self._building_preset:
            # an engine built before the one awaited (a reset queued ahead of the switch, or a switch
            # replaced by a later one): the run that goes on if the awaited build fails; still no controls
            self._variants_held = n.payload
            return
        self._release_variants(n.payload)
        self.message(f"loaded {n.text}")
        self._ask_tracer_capacity()

    def restore_last_good(self) -> None:
        self.worker.send("restore")
        self._ask_tracer_capacity()

    def _ask_tracer_capacity(self) -> None:
        self._call("tracer-capacity", lambda e: e.tracer_capacity(), self._show_tracer_capacity)

    def _show_tracer_capacity(self, capacity) -> None:
        """Enable the "tracers per seed" control when the engine's tracers can change while running."""
        self._tracer_capacity = capacity
        self.tracer_spin.setEnabled(capacity is not None)
        if capacity is not None:
            self.tracer_spin.blockSignals(True)
            self.tracer_spin.setValue(int(capacity))
            self.tracer_spin.blockSignals(False)

    def _tracer_count_changed(self, *_) -> None:
        count = int(self.tracer_spin.value())
        if not self.tracer_spin.isEnabled() or count == self._tracer_capacity:
            return  # nothing changed: the ring is not rebuilt

        def apply(e):
            e.set_tracer_count(count)
            return e.tracer_capacity()

        self._call("tracer-count", apply, lambda cap: (self._show_tracer_capacity(cap),
                                                       self.message(f"tracers per seed: {cap}")))

    def _on_variant(self, n) -> None:
        self._variant_changed(n.payload)
        self.message(f"variant {n.text}")

    def _on_diverged(self, n) -> None:
        self.status_labels["state"].setText("DIVERGED")
        self.error("Simulation diverged", n.text)

    def _on_preset_kept(self, n) -> None:
        """A preset the worker could not build: the UI shows the preset of the run still loaded."""
        if self.building:  # that run's variants come back (none when no engine is loaded)
            self._release_variants(self._variants_held if n.payload is not None else {})
        if n.payload is not None and n.payload is not self.preset:
            self._apply_preset_to_ui(n.payload)

    def _on_error(self, n) -> None:
        if self._loading_run is not None:  # the new preset was not built: the old run goes on, shown again
            self._end_loading()
            self.progress_bar.hide()
        self.error("nagare", n.text)

    def _on_checkpoint(self, n) -> None:
        try:
            path = export.write_checkpoint(n.payload, n.text)
            self.message(f"checkpoint written: {path}")
        except export.ExportError as exc:
            self.error("Checkpoint not written", str(exc))

    def _on_result(self, n) -> None:
        cb = self._result_callbacks.pop(n.text, None)
        if cb is not None:
            cb(n.payload)

    def _shown_step(self, st) -> int:
        """The step shown beside the simulated time: the frame on screen's, as its time is (the
        stats are sampled less often than frames are drawn, so their step lags the picture);
        the stats' step before the first frame."""
        shown = self.canvas.shown_step()
        return shown if shown is not None else (st.step if st else 0)

    def _update_status(self) -> None:
        w = self.worker
        st = w.latest_stats()
        state = "DIVERGED" if w.diverged else ("running" if w.running else "paused")
        if self.recorder is not None:
            state += f" · REC {self.recorder.frames}"
        self.status_labels["state"].setText(state)
        if self.building:  # the old engine's figures are not the new one's
            self.status_labels["steps"].setText(f"building {self._loading_name}")
            self.status_labels["throughput"].setText("")
            self.status_labels["roofline"].setText("")
        elif st is not None:
            self._show_frame_labels(self._shown_step(st), st, self.canvas.shown_time())
            self.status_labels["throughput"].setText(throughput_text(st.updates_per_s, st.gbytes_per_s))
            self.status_labels["roofline"].setText(
                "roofline —" if st.roofline_pct is None else f"{st.roofline_pct:.1f} % roofline")
        self.status_labels["display"].setText(f"display: {self.canvas.display_label}")
        if st is None or self.building:
            self.status_labels["time"].setText(self.canvas.shown_time())
        self._reflow_message()

    def _show_frame_labels(self, step: int, st, shown_time: str) -> None:
        """The status line's step and simulated time: those of the frame on screen, as the HUD's."""
        if self.building or st is None:
            return
        for key, text in (("steps", f"step {step} · {st.steps_per_s:,.0f} steps/s"), ("time", shown_time)):
            if self.status_labels[key].text() != text:
                self.status_labels[key].setText(text)

    # ---- messages ----------------------------------------------------------------------
    MESSAGE_MS = 6000  # how long a status-bar message stays

    def message(self, text: str) -> None:
        self.messages.append(text)
        sb = self.statusBar()
        shown = self._elided_message(text)
        self._message_full, self._message_until = text, time.monotonic() + self.MESSAGE_MS / 1000
        sb.showMessage(shown, self.MESSAGE_MS)
        # QStatusBar clips a message at the first permanent label, mid-word ("…22.8 ("): one that
        # does not fit ends in "…" and its whole text is the status bar's tooltip while it is shown
        sb.setToolTip(text if shown != text else "")
        log.info("nagare: %s", text)

    def _reflow_message(self) -> None:
        """The message shown, elided again to the room the permanent labels leave now: they change
        while it is shown (a run that pauses at its end writes "paused" and a longer time), and a
        message elided to the old room ran under them."""
        sb, full = self.statusBar(), getattr(self, "_message_full", None)
        left_ms = int((getattr(self, "_message_until", 0.0) - time.monotonic()) * 1000)
        if not full or not sb.currentMessage() or left_ms <= 0:
            return
        shown = self._elided_message(full)
        if shown != sb.currentMessage():
            sb.showMessage(shown, left_ms)
            sb.setToolTip(full if shown != full else "")

    def _elided_message(self, text: str) -> str:
        """``text`` on one line, elided with "…" to the room the status bar's permanent labels leave."""
        sb = self.statusBar()
        line = " ".join(text.split())
        lefts = [lab.geometry().left() for lab in getattr(self, "status_labels", {}).values()
                 if lab.isVisible() and lab.text()]
        room = (min(lefts) if lefts else sb.width()) - 12  # the message's own margins
        return sb.fontMetrics().elidedText(line, Qt.TextElideMode.ElideRight, max(room, 40))

    def _status_message_changed(self, text: str) -> None:
        if not text:  # the message timed out or was replaced by none: its tooltip goes with it
            self.statusBar().setToolTip("")

    def error(self, title: str, text: str) -> None:
        """A non-blocking error dialog (the run goes on) and a status-bar line."""
        self.message(text)
        box = QtWidgets.QMessageBox(QtWidgets.QMessageBox.Icon.Warning, title, text,
                                    QtWidgets.QMessageBox.StandardButton.Ok, self)
        box.setModal(False)
        box.show()
        box.raise_()  # the newest error on top of anything shown before it
        self.last_error_box = box

    # ---- export ------------------------------------------------------------------------
    def _stamp(self) -> str:
        return f"{Path(self.preset.source).stem}-{time.strftime('%Y%m%d-%H%M%S')}-{int(time.time() * 1000) % 1000:03d}"

    def screenshot(self, path: str | Path | None = None) -> Path | None:
        path = Path(path) if path else self.output_dir / f"{self._stamp()}.png"
        try:
            out = export.save_png(self.canvas.export_frame(), path)
        except export.ExportError as exc:
            self.error("Screenshot not written", str(exc))
            return None
        self.message(f"screenshot written: {out}")
        return out

    def toggle_recording(self, path: str | Path | None = None) -> None:
        if self.recorder is None:
            path = Path(path) if path else self.output_dir / f"{self._stamp()}.mp4"
            fps = self.video_fps.value()
            try:
                self.recorder = export.VideoRecorder(path, fps=fps)
            except export.ExportError as exc:
                self.error("Recording not started", str(exc))
                return
            # from the frame on screen on: every packet published from now on goes into the video
            self._recorded_seq = self._last_seq - 1 if self._last_seq >= 0 else -1
            self.canvas.hold_layout(True)  # the frames keep one size (a HUD growing would move the field)
            self.worker.send("recording", on=True)
            self.record_button.setText("Stop recording (V)")
            self.message(f"recording to {path}: one video frame per published frame, played at {fps} frames/s")
        else:
            rec, self.recorder = self.recorder, None
            self.worker.send("recording", on=False)
            self.canvas.hold_layout(False)
            self.record_button.setText("Record MP4 (V)")
            try:
                out = rec.close()
            except export.ExportError as exc:
                self.error("Video not written", str(exc))
                return
            self.message(f"video written: {out} — {rec.summary()}" if out else "no frame was recorded")

    def _record_published(self) -> None:
        """Every packet published since the last one recorded into the video, in order (not only
        the newest one drawn: a frame cap or a slow draw must not drop published frames)."""
        packets = [pk for pk in self.worker.packets_after(self._recorded_seq)
                   if self._loading_run is None or pk.run >= self._loading_run]  # none of a replaced run
        if packets and self._recorded_seq >= 0:
            self.recorder.missed += packets[0].seq - self._recorded_seq - 1  # gone from the worker's slots
        for pk in packets:
            self._recorded_seq = pk.seq
            self.canvas.show_packet(pk)  # uploaded by grab()
            try:
                self.recorder.append(self.canvas.export_frame())
            except export.ExportError as exc:
                self.recorder = None
                self.worker.send("recording", on=False)
                self.canvas.hold_layout(False)
                self.record_button.setText("Record MP4 (V)")
                self.error("Recording stopped", str(exc))
                return
        if packets:
            self._last_seq = packets[-1].seq  # drawn already: the screen shows the newest of them
            self._pacer.drawn(time.perf_counter())
            self.canvas.update()
            if self._loading_run is not None:  # the new run's first frame was recorded (and shown)
                self._end_loading()

    def _call(self, tag: str, fn, callback) -> None:
        self._result_callbacks[tag] = callback
        self.worker.send("call", fn=fn, tag=tag)

    def export_timings(self, path: str | Path | None = None) -> None:
        path = Path(path) if path else self.output_dir / f"{self._stamp()}-timings.csv"
        log_ = self.worker.timing_log
        if log_ is None:
            self.error("Timing log not written", "no engine is running")
            return

        def write(_):
            try:
                out = log_.write(path)
                self.message(f"timing log written: {', '.join(map(str, out))}")
            except export.ExportError as exc:
                self.error("Timing log not written", str(exc))

        # record a last row on the worker thread (the log belongs to it), then write here
        self._call(f"timings:{path}", lambda eng: log_.record(wait=True), write)

    def export_vtk(self, folder: str | Path | None = None) -> None:
        folder = Path(folder) if folder else self.output_dir
        stem = self._stamp()

        def write(fields):
            try:
                out = export.write_vtk(fields, folder, stem)
                self.message(f"VTK written: {', '.join(map(str, out))}")
            except export.ExportError as exc:
                self.error("VTK not written", str(exc))

        self._call(f"vtk:{stem}", export.host_copies, write)

    def export_vtkhdf(self, path: str | Path | None = None) -> None:
        """Every field into one VTKHDF file (ParaView ≥ 5.13 opens it; see docs/app.md)."""
        path = Path(path) if path else self.output_dir / f"{self._stamp()}.vtkhdf"

        def write(payload):
            fields, t, step = payload
            try:
                out = export.write_vtkhdf_described(fields, path, time=t, step=step)
            except export.ExportError as exc:
                self.error("VTKHDF not written", str(exc))
                return
            for p, what in out:  # an amr3d export writes three files: say what each holds
                log.info("nagare: %s: %s", p, what)
            self.message("VTKHDF written: " + "; ".join(f"{p} ({what})" for p, what in out))

        self._call(f"vtkhdf:{path}", lambda eng: (vtkhdf_fields(eng), eng.time, eng.step_count), write)

    def save_checkpoint(self, path: str | Path | None = None) -> None:
        path = Path(path) if path else self.output_dir / f"{self._stamp()}.npz"
        self.worker.send("checkpoint", path=str(path))

    def _load_ckpt_dialog(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Load checkpoint", str(self.output_dir), "*.npz")
        if path:
            self.load_checkpoint(path)

    def load_checkpoint(self, path: str | Path) -> bool:
        try:
            ckpt = load_checkpoint(path)
        except NagareError as exc:
            self.error("Cannot load checkpoint", str(exc))
            return False
        self.worker.send("restore", checkpoint=ckpt)
        self._ask_tracer_capacity()  # a checkpoint carries its own tracer count
        return True

    # ---- shutdown ----------------------------------------------------------------------
    def closeEvent(self, event) -> None:
        app = QtWidgets.QApplication.instance()
        for f in (self._typing_guard, self._tooltip_wrapper):  # app-wide filters: not past this window
            app.removeEventFilter(f)
        self.timer.stop()
        if self.recorder is not None:
            self.toggle_recording()
        self.worker.stop()
        super().closeEvent(event)


def _only_current_available(info: dict) -> bool:
    """An axis with choices besides its current one, every one of them unavailable here."""
    others = [r for c, r in info["choices"].items() if c != info["current"]]
    return bool(others) and all(others)
