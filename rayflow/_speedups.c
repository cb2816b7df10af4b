/* rayflow._speedups: a hand-written C kernel for the per-tuple paths of a word count -- a
 * BasicBolt's emit and run loop, a spout's emit, a Tuple's subscript -- against the CPython C API
 * (3.10 and later, not the limited API, not free-threaded). Optional: setup.py builds it on install when a C compiler and Python's headers
 * are there, and rayflow/_executors/kernel.py loads it unless RAYFLOW_PURE_PYTHON=1 is set, the
 * import fails or setup() refuses; otherwise the Python it replaces runs
 * (BasicBoltAdapter.run_inline and the emits of input_emit.py). The Python is the contract: every
 * path here must do what it does, tuple for tuple and edge for edge (tests/test_emit_paths.py,
 * tests/test_kernel.py; benchmarks/c_kernel.py --asan runs the semantics tests under
 * AddressSanitizer).
 *
 *   EmitKernel(executor, collector, fallback, default_stream)
 *       Installed as BasicOutputCollector.emit after BoltExecutor.wire_input_emits: the fast
 *       path of the emit input_emit.py builds per stream, in C, for every regular stream
 *       (its route found in executor.routes, the last one kept). Anything off the fast path -- an undeclared or
 *       direct stream, a wrong arity, no input, an input in several trees or acked already,
 *       keyword arguments other than ``stream``, values that are not a list -- is handed whole
 *       to ``fallback`` (BoltExecutor.emit_input, which dispatches to the Python emits), before
 *       any side effect. An observer or the debug log (executor._watched, read when the kernel
 *       is built: the executor builds it again when an observer comes or goes) is served in C
 *       by calling executor._emitted, as the Python emits do.
 *   SpoutEmit(executor, fallback, default_stream)
 *       Installed as SpoutOutputCollector.emit by SpoutExecutor._wire_kernel_emit: the fast path
 *       of SpoutExecutor.emit, called as the collector's emit(values, msg_id=None,
 *       stream="default"), so that a spout tuple costs one C call. Anything off it -- an
 *       undeclared or direct stream, a wrong arity, values that are not a list, a stream that is
 *       not a str, arguments emit does not take -- goes whole to ``fallback`` (the collector's
 *       own emit, so SpoutExecutor.emit) before any side effect. On it, what the Python does in
 *       its order: targets (route.fixed, else route.known for a str key), executor.exhausted = False,
 *       metrics.emitted, executor._emitted(stream, values, targets, msg_id) if _watched, the root
 *       from executor.root_bits(64) (drawn by the kernel where that is anchoring.getrandbits, the
 *       default; read per call: the in-process runner seeds it per task; 0
 *       gives anchoring.new_id()) or the msg id into _acked_at_emit without ackers, the tuple in
 *       each target's batch with an edge id, the init in the acker mail, pending.newest[root],
 *       _started[root] = time.perf_counter() for a root sampled for latency, and
 *       _cut.epoch.append((root, msg_id)) under exactly-once; it returns a copy of the targets.
 *   run_inline(task, execute, collector, mails, column, trees, source, joined, on_error) -> int
 *       The loop of BasicBoltAdapter.run_inline: builds each Tuple (a one-field source's inputs
 *       come as the bare values and are put in a list of one here, as the Python loop does),
 *       sets collector.input, calls execute, folds acks per root into the acker mails; an
 *       exception that is an Exception is handed to on_error(tup, exc) (which reports unless
 *       FailedException, and fails), anything else propagates. A Tuple that nothing but the loop
 *       and collector.input refers to once execute has returned (the bolt kept no reference)
 *       is the next input's: its slots are written again instead of a Tuple being freed and
 *       another allocated, and its values list, where nothing else holds that either, refilled;
 *       no one can tell (a Tuple takes no weak reference). The list an emit returns is likewise
 *       the one it returned last where the caller dropped it (returned_copy).
 *   EmitCount()
 *       TaskMetrics.kernel_emits of an executor whose emits the kernel serves (set when they are
 *       wired): the kernels count each emit in it, a C integer, where an int slot would take a
 *       new int object per emit; TaskMetrics.emitted adds it to python_emits.
 *   IdBuffer()
 *       DataBatch.trees where the kernel runs (kernel.py sets DataBatch.new_ids): the batch's ids
 *       as raw 64-bit numbers, which the emit kernels append without making an int per edge and
 *       DataBatch.take copies into the payload's array through the buffer protocol (the wire
 *       carries that array, as in pure Python). The Python emits extend it with += as a list.
 *       AckerMail.raw_acks too (AckerMail.new_ids): the run loop appends each root's ack there.
 *   IdReader(ids)
 *       kernel.read_ids of a received payload's id array: an iterator of its ints for every
 *       Python loop, which run_inline reads raw (no int per id it does not need, one for the
 *       inputs of one root in a row).
 *   flat_mail(inits, acks, raw_acks) -> (IdBuffer, IdBuffer)
 *       AckerMail.take's arrays (kernel.py wraps it as AckerMail.flatten): every ack folded into
 *       its root's init, or into one ack per root, as _outbox.flat_mail does.
 *   join_strings(values, sep) -> str | None
 *       ValueColumn's joined wire form, as _outbox.join_strings checks it: every value a plain
 *       str (checked without a call per value), none holding sep.
 *   counters() -> {"emit_fast": n, "emit_fallback": n, "run_inline": n, "tuples_reused": n,
 *                  "spout_emit_fast": n, "spout_emit_fallback": n, "getitem_fast": n,
 *                  "getitem_fallback": n}
 *       What ran where: a test asserts that the fast paths were taken.
 *   Tuple's subscript (installed by setup)
 *       tup[key] for an int key or a str key in the source's index, on a list of values, in C
 *       (Tuple.__getitem__ of _tuple.py, whose Python function stays the fallback for every
 *       other key and every error, so the messages are its own). Tuple.__getitem__ becomes a
 *       method of the kernel: CPython 3.11 would otherwise keep pushing the Python function's
 *       frame where it specialized tup[key], whatever the slot says.
 *   setup(Tuple, TupleSource, DataBatch, Route, AckerMail, TaskMetrics, seed)
 *       Once, at import: finds the __slots__ member descriptors of those classes and keeps
 *       their offsets, so that the kernels read and write slots directly (no getattr), seeds
 *       the edge-id generator from 32 bytes (os.urandom), and installs Tuple's subscript. A
 *       slot renamed since, or a Tuple whose __getitem__ is not a Python function, raises
 *       TypeError here, naming it, and the kernel stays unusable (the loader runs Python).
 *
 * Edge ids: 64 random bits, never 0 (redrawn), from xoshiro256** (like anchoring's generator,
 * not reseeded on fork).
 *
 * The kernel caches what BoltExecutor never rebinds after Emitter.__init__: routes, _batches,
 * outbox, outbox.batch_size, metrics, task_id (and a spout's pending map), and executor._watched
 * (an executor whose observer comes or goes builds its kernels again). Each kernel also keeps the
 * last route it found in routes (by stream object) and the last batch in _batches (by task
 * object): neither dict is mutated after Emitter.__init__ (the Python emits bind the same routes
 * and batches when they are built), so a key object seen last needs no lookup. It counts its
 * emits in metrics.kernel_emits (an EmitCount; metrics.python_emits through its slot where there
 * is none), and reads collector.input on every call (it
 * changes while a task runs) through BasicOutputCollector's slot (found when the kernel is
 * built; a collector of a class without it, in its instance dict). It reads a spout's exhausted,
 * tracking, root_bits, _acked_at_emit, _cut, outbox.acker_mails (shared when chained) and
 * pending.newest (new at each rotation) on every call too, in the instance dicts of the
 * executor, the outbox and the pending map, taken once (PyObject_GenericGetDict,
 * which makes CPython 3.11 keep those objects' attributes in a dict from then on): a getattr
 * or setattr call costs several hundred instructions, a dict lookup of an interned name tens.
 * PyMemberDescrObject and instance dicts are outside the limited API: no abi3 build. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

/* ids as C unsigned long: CPython converts those directly (an unsigned long long goes through a
   byte buffer), as anchoring.ID_TYPECODE says. */
_Static_assert(sizeof(unsigned long) == 8, "64-bit unsigned long wanted");

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static PyTypeObject *TupleType, *SourceType, *BatchType, *RouteType, *MailType, *MetricsType;
static Py_ssize_t off_t_values, off_t_source, off_t_tree, off_t_val, off_s_fields, off_s_index;
static Py_ssize_t off_r_stream, off_r_emit_arity, off_r_single, off_r_subscribed, off_r_key, off_r_known,
    off_r_choose, off_r_fixed;
static Py_ssize_t off_b_values, off_b_trees, off_b_stream;
static Py_ssize_t off_m_acks, off_m_inits, off_m_raw;
static Py_ssize_t off_x_emitted, off_x_kernel_emits; /* TaskMetrics.python_emits, TaskMetrics.kernel_emits */
static int ready = 0;
static PyObject *int_zero, *int_one, *int_64, *time_module, *empty_list;
#define LATENCY_SAMPLE_MASK 7 /* spout.LATENCY_SAMPLE_MASK: a tree is sampled for latency when these bits of its root are 0 */

static PyObject *s_stream, *s_emitted_hook, *s_watched, *s_input, *s_emitted, *s_switch, *s_remember, *s_send_batch, *s_ack_trees,
    *s_routes, *s_batches, *s_outbox, *s_batch_size, *s_metrics, *s_task_id, *s_msg_id, *s_exhausted, *s_tracking,
    *s_root_bits, *s_new_id, *s_acked_at_emit, *s_append, *s_acker_mails, *s_newest, *s_started, *s_perf_counter,
    *s_cut, *s_epoch, *s_pending;

/* -- edge ids ---------------------------------------------------------------------------- */
static uint64_t rng_s[4];

static inline uint64_t rotl(const uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t xoshiro_next(void) {
    const uint64_t result = rotl(rng_s[1] * 5, 7) * 9;
    const uint64_t t = rng_s[1] << 17;
    rng_s[2] ^= rng_s[0];
    rng_s[3] ^= rng_s[1];
    rng_s[1] ^= rng_s[2];
    rng_s[0] ^= rng_s[3];
    rng_s[2] ^= t;
    rng_s[3] = rotl(rng_s[3], 45);
    return result;
}

/* -- Tuple.__getitem__ ----------------------------------------------------------------- */
static PyObject *py_getitem; /* Tuple.__getitem__ as _tuple.py defines it: the contract and the fallback */
static unsigned long long n_getitem_fast, n_getitem_fallback;

/* tup[key]: an int key, or a str key named by the source's index, of a list of values, in C;
   anything else (another key, a key not found, an index out of range, values not a list) by
   the Python method, which raises the errors a user reads. */
static PyObject *tuple_subscript(PyObject *self, PyObject *key) {
    if (!PyObject_TypeCheck(self, TupleType)) goto fallback; /* a Tuple class of an earlier setup */
    PyObject *values = SLOT(self, off_t_values);
    if (values == NULL || !PyList_CheckExact(values)) goto fallback;
    PyObject *pos = key;
    if (PyUnicode_CheckExact(key)) { /* self.values[self._source.index[key]] */
        PyObject *source = SLOT(self, off_t_source);
        if (source == NULL || Py_TYPE(source) != SourceType) goto fallback;
        PyObject *index = SLOT(source, off_s_index);
        if (index == NULL || !PyDict_CheckExact(index)) goto fallback;
        pos = PyDict_GetItemWithError(index, key); /* borrowed */
        if (pos == NULL) {
            PyErr_Clear();
            goto fallback;
        }
    }
    if (!PyLong_CheckExact(pos)) goto fallback; /* a slice, a bool, a str subclass... */
    Py_ssize_t i = PyLong_AsSsize_t(pos);
    if (i == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto fallback;
    }
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (i < 0) i += n;
    if (i < 0 || i >= n) goto fallback;
    n_getitem_fast++;
    return Py_NewRef(PyList_GET_ITEM(values, i));
fallback:
    n_getitem_fallback++;
    PyObject *args[2] = {self, key};
    return PyObject_Vectorcall(py_getitem, args, 2, NULL);
}

static PyObject *tuple_getitem_method(PyObject *self, PyObject *key) { return tuple_subscript(self, key); }

static PyMethodDef getitem_def = {"__getitem__", tuple_getitem_method, METH_O,
                                  "tup[key]: the value at an index, or of a field by name (Tuple.__getitem__, in C)."};

/* The Python __getitem__ of the Tuple type (borrowed), or NULL with TypeError if it has none: also
   when the kernel's own is installed already (setup again), it is the one kept from the first. */
static PyObject *python_getitem(PyTypeObject *type) {
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE) || type->tp_as_mapping == NULL) {
        PyErr_Format(PyExc_TypeError, "%s is not a class with a __getitem__ slot", type->tp_name);
        return NULL;
    }
    PyObject *descr = PyDict_GetItemString(type->tp_dict, "__getitem__"); /* borrowed */
    if (descr != NULL && PyFunction_Check(descr)) return descr;
    if (descr != NULL && py_getitem != NULL && Py_TYPE(descr) == &PyMethodDescr_Type &&
        ((PyMethodDescrObject *)descr)->d_method == &getitem_def)
        return py_getitem;
    PyErr_Format(PyExc_TypeError, "%s.__getitem__ is not a Python function", type->tp_name);
    return NULL;
}

/* The type's subscript is tuple_subscript from now on, and its __getitem__ a method of the kernel:
   left a Python function, CPython 3.11 would keep calling it where it specialized tup[key]
   (BINARY_SUBSCR_GETITEM pushes its frame without looking at the slot). The dict is written
   directly, not through setattr, which would put the generic slot back. PyType_Modified drops
   what the interpreter cached of the type. */
static int install_subscript(PyTypeObject *type, PyObject *getitem) {
    PyObject *method = PyDescr_NewMethod(type, &getitem_def);
    if (method == NULL) return -1;
    Py_INCREF(getitem); /* before the dict lets go of it */
    if (PyDict_SetItemString(type->tp_dict, "__getitem__", method) < 0) {
        Py_DECREF(getitem);
        Py_DECREF(method);
        return -1;
    }
    Py_DECREF(method);
    Py_XSETREF(py_getitem, getitem);
    type->tp_as_mapping->mp_subscript = tuple_subscript;
    PyType_Modified(type);
    return 0;
}

/* -- setup ------------------------------------------------------------------------------- */
static int member_offset(PyTypeObject *type, const char *name, Py_ssize_t *out) {
    PyObject *descr = PyDict_GetItemString(type->tp_dict, name); /* borrowed */
    if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, name);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%s: unexpected member kind", type->tp_name, name);
        return -1;
    }
    *out = m->offset;
    return 0;
}

static PyObject *setup(PyObject *mod, PyObject *args) {
    PyObject *tt, *st, *bt, *rt, *mt, *xt;
    Py_buffer seed;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!y*", &PyType_Type, &tt, &PyType_Type, &st, &PyType_Type, &bt,
                          &PyType_Type, &rt, &PyType_Type, &mt, &PyType_Type, &xt, &seed))
        return NULL;
    if (seed.len < 32) {
        PyBuffer_Release(&seed);
        PyErr_SetString(PyExc_ValueError, "seed: 32 bytes wanted");
        return NULL;
    }
    uint64_t seed_s[4];
    memcpy(seed_s, seed.buf, 32);
    PyBuffer_Release(&seed);
    /* the offsets in use, put back if one is missing: kernels made before keep working */
    Py_ssize_t *const offsets[] = {&off_t_values, &off_t_source, &off_t_tree, &off_t_val, &off_s_fields, &off_s_index,
                                   &off_r_stream, &off_r_emit_arity, &off_r_single, &off_r_subscribed, &off_r_key,
                                   &off_r_known, &off_r_choose, &off_r_fixed, &off_b_values, &off_b_trees, &off_b_stream,
                                   &off_m_acks, &off_m_inits, &off_m_raw, &off_x_emitted, &off_x_kernel_emits};
    enum { N_OFFSETS = sizeof(offsets) / sizeof(offsets[0]) };
    Py_ssize_t before[N_OFFSETS];
    for (int i = 0; i < N_OFFSETS; i++) before[i] = *offsets[i];
    PyTypeObject *tuple_t = (PyTypeObject *)tt, *source_t = (PyTypeObject *)st, *batch_t = (PyTypeObject *)bt,
                 *route_t = (PyTypeObject *)rt, *mail_t = (PyTypeObject *)mt, *metrics_t = (PyTypeObject *)xt;
    if (member_offset(tuple_t, "values", &off_t_values) || member_offset(tuple_t, "_source", &off_t_source) ||
        member_offset(tuple_t, "_tree", &off_t_tree) || member_offset(tuple_t, "_val", &off_t_val) ||
        member_offset(source_t, "fields", &off_s_fields) || member_offset(source_t, "index", &off_s_index) ||
        member_offset(route_t, "stream", &off_r_stream) ||
        member_offset(route_t, "emit_arity", &off_r_emit_arity) || member_offset(route_t, "single", &off_r_single) ||
        member_offset(route_t, "subscribed", &off_r_subscribed) || member_offset(route_t, "key", &off_r_key) ||
        member_offset(route_t, "known", &off_r_known) || member_offset(route_t, "choose", &off_r_choose) ||
        member_offset(route_t, "fixed", &off_r_fixed) ||
        member_offset(batch_t, "values", &off_b_values) || member_offset(batch_t, "trees", &off_b_trees) ||
        member_offset(batch_t, "stream", &off_b_stream) || member_offset(mail_t, "acks", &off_m_acks) ||
        member_offset(mail_t, "inits", &off_m_inits) || member_offset(mail_t, "raw_acks", &off_m_raw) || member_offset(metrics_t, "python_emits", &off_x_emitted) ||
        member_offset(metrics_t, "kernel_emits", &off_x_kernel_emits)) {
        for (int i = 0; i < N_OFFSETS; i++) *offsets[i] = before[i];
        return NULL;
    }
    PyObject *getitem = python_getitem(tuple_t); /* borrowed */
    if (getitem == NULL) {
        for (int i = 0; i < N_OFFSETS; i++) *offsets[i] = before[i];
        return NULL;
    }
    if (install_subscript(tuple_t, getitem) < 0) {
        for (int i = 0; i < N_OFFSETS; i++) *offsets[i] = before[i];
        return NULL;
    }
    memcpy(rng_s, seed_s, 32);
    if (!(rng_s[0] | rng_s[1] | rng_s[2] | rng_s[3])) rng_s[0] = 1;
    /* again (a test loads twice): the new types replace the old, whose references go */
    Py_XSETREF(TupleType, (PyTypeObject *)Py_NewRef(tt));
    Py_XSETREF(SourceType, (PyTypeObject *)Py_NewRef(st));
    Py_XSETREF(BatchType, (PyTypeObject *)Py_NewRef(bt));
    Py_XSETREF(RouteType, (PyTypeObject *)Py_NewRef(rt));
    Py_XSETREF(MailType, (PyTypeObject *)Py_NewRef(mt));
    Py_XSETREF(MetricsType, (PyTypeObject *)Py_NewRef(xt));
    ready = 1;
    Py_RETURN_NONE;
}

/* -- helpers ----------------------------------------------------------------------------- */
static inline void slot_set(PyObject *obj, Py_ssize_t off, PyObject *value) { /* steals value */
    PyObject *old = SLOT(obj, off);
    SLOT(obj, off) = value;
    Py_XDECREF(old);
}

/* -- EmitCount --------------------------------------------------------------------------- */
/* What the kernels emitted for one task: TaskMetrics.kernel_emits where the kernel runs. A C
   counter, because an int in a slot would be a new object on every emit. */
typedef struct {
    PyObject_HEAD uint64_t n;
} EmitCount;

static PyObject *emit_count_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "EmitCount() takes no arguments");
        return NULL;
    }
    EmitCount *c = (EmitCount *)type->tp_alloc(type, 0);
    if (c != NULL) c->n = 0;
    return (PyObject *)c;
}

static PyObject *emit_count_value(EmitCount *c, void *closure) { return PyLong_FromUnsignedLongLong(c->n); }

static PyGetSetDef emit_count_getset[] = {
    {"value", (getter)emit_count_value, NULL, "Emits counted so far.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject EmitCountType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rayflow._speedups.EmitCount",
    .tp_basicsize = sizeof(EmitCount),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = emit_count_new,
    .tp_getset = emit_count_getset,
    .tp_doc = "The emits the kernels counted for one task (TaskMetrics.kernel_emits; see the module docstring).",
};

/* One emit more: into metrics.kernel_emits where it is an EmitCount, else metrics.python_emits
   += 1 through its slot (``metrics`` is a TaskMetrics: read_emitter checks) */
static int count_emitted(PyObject *metrics) {
    PyObject *c = SLOT(metrics, off_x_kernel_emits);
    if (c != NULL && Py_TYPE(c) == &EmitCountType) {
        ((EmitCount *)c)->n++;
        return 0;
    }
    PyObject *n = SLOT(metrics, off_x_emitted);
    if (n == NULL) {
        PyErr_SetObject(PyExc_AttributeError, s_emitted);
        return -1;
    }
    PyObject *m;
    Py_ssize_t v = PyLong_CheckExact(n) ? PyLong_AsSsize_t(n) : -1;
    if (v >= 0 && v < PY_SSIZE_T_MAX)
        m = PyLong_FromSsize_t(v + 1);
    else { /* not a plain int in range (a user's own count): as Python adds */
        PyErr_Clear();
        m = PyNumber_Add(n, int_one);
    }
    if (m == NULL) return -1;
    slot_set(metrics, off_x_emitted, m);
    return 0;
}

/* obj.name from the instance dict ``d``, as a new reference (AttributeError if absent) */
static PyObject *dict_attr(PyObject *d, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(d, name);
    if (v == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, name);
        return NULL;
    }
    return Py_NewRef(v);
}

/* Where a collector keeps ``input`` (the Tuple being executed): a __slots__ member of its class
   (BasicOutputCollector's), read and written at ``offset``, or else its instance ``dict`` (a
   collector of another class). */
typedef struct {
    Py_ssize_t offset; /* > 0: the member's offset */
    PyObject *dict;    /* otherwise the instance dict, held */
} InputRef;

/* Finds where ``collector`` keeps input: the member its class's ``input`` names, if that is a
   writable object member of a class ``collector`` is an instance of, else the instance dict. */
static int input_ref(PyObject *collector, InputRef *in) {
    in->offset = 0;
    in->dict = NULL;
    PyObject *descr = _PyType_Lookup(Py_TYPE(collector), s_input); /* borrowed */
    if (descr != NULL && Py_TYPE(descr) == &PyMemberDescr_Type &&
        PyObject_TypeCheck(collector, PyDescr_TYPE(descr))) {
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY) && m->offset > 0) {
            in->offset = m->offset;
            return 0;
        }
    }
    in->dict = PyObject_GenericGetDict(collector, NULL);
    if (in->dict == NULL) return -1;
    if (!PyDict_CheckExact(in->dict)) {
        PyErr_SetString(PyExc_TypeError, "the collector's instance dict must be a dict");
        return -1;
    }
    return 0;
}

/* collector.input, borrowed; NULL if unset (with an error set only if a lookup failed) */
static inline PyObject *input_peek(PyObject *collector, const InputRef *in) {
    return in->offset ? SLOT(collector, in->offset) : PyDict_GetItemWithError(in->dict, s_input);
}

/* collector.input, a new reference (AttributeError if unset) */
static PyObject *input_get(PyObject *collector, const InputRef *in) {
    PyObject *v = input_peek(collector, in);
    if (v == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, s_input);
        return NULL;
    }
    return Py_NewRef(v);
}

/* collector.input = v (not stolen) */
static inline int input_set(PyObject *collector, const InputRef *in, PyObject *v) {
    if (in->offset) {
        PyObject *old = SLOT(collector, in->offset);
        SLOT(collector, in->offset) = Py_NewRef(v);
        Py_XDECREF(old);
        return 0;
    }
    return PyDict_SetItem(in->dict, s_input, v);
}

/* The last (key object -> value) a kernel looked up in a dict it caches (routes by stream, _batches
   by task), both held: a call with the same key object (a str or int the caller passes again, the
   route's own stream name, a route's task id) reuses the value without a dict lookup. Sound
   because those dicts are complete when the kernel is built and never mutated after (the Python
   emits bind the same routes and batches when wired: see the header); a key object not seen last
   is looked up, and becomes the last. */
typedef struct {
    PyObject *key, *value;
} LastHit;

static inline void last_hit_set(LastHit *h, PyObject *key, PyObject *value) {
    Py_INCREF(key);
    Py_INCREF(value);
    Py_XSETREF(h->key, key);
    Py_XSETREF(h->value, value);
}

/* -- IdBuffer ---------------------------------------------------------------------------- */
/* DataBatch.trees where the kernel runs: a growable array of 64-bit ids (roots and edges, as
   DataPayload's trees), which the emit kernels append to as raw numbers -- a list would take a
   new int per edge, and DataBatch.take would convert each id again. The Python emits extend it
   with ``trees += (root, edge)`` as they extend a list; it indexes, iterates and measures like
   one, and exports its ids through the buffer protocol (format "L", read-only), which is how
   DataBatch.take copies them into the payload's array. It does not pickle: the wire carries
   that array. */
typedef struct {
    PyObject_HEAD uint64_t *ids;
    Py_ssize_t len, cap;
    Py_ssize_t exports;             /* buffers handed out: no appending while one is */
    Py_ssize_t shape[1], strides[1]; /* of the buffers handed out (the same for all: len is fixed) */
} IdBuffer;

static PyTypeObject IdBufferType;

/* room for ``more`` ids; refused while a buffer is exported (its length would change under it) */
static int ids_reserve(IdBuffer *b, Py_ssize_t more) {
    if (b->exports > 0) {
        PyErr_SetString(PyExc_BufferError, "an IdBuffer cannot grow while its buffer is exported");
        return -1;
    }
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 16;
    while (cap < b->len + more) {
        if (cap > PY_SSIZE_T_MAX / 16) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    uint64_t *ids = PyMem_Realloc(b->ids, (size_t)cap * sizeof(uint64_t));
    if (ids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->ids = ids;
    b->cap = cap;
    return 0;
}

/* appends the pair (a, b): a tuple's root and edge */
static inline int ids_push2(IdBuffer *b, uint64_t x, uint64_t y) {
    if ((b->exports > 0 || b->len + 2 > b->cap) && ids_reserve(b, 2) < 0) return -1;
    b->ids[b->len] = x;
    b->ids[b->len + 1] = y;
    b->len += 2;
    return 0;
}

/* an id from a Python int: 0 <= id < 2**64, else OverflowError (as array('L') raises); -1 with
   an error set on failure */
static int id_from(PyObject *o, uint64_t *out) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "an id must be an int, not %.200s", Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = PyLong_AsUnsignedLong(o);
    return *out == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *ids_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "IdBuffer() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0); /* zeroed: empty */
}

static void ids_dealloc(IdBuffer *b) {
    PyMem_Free(b->ids);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static Py_ssize_t ids_length(IdBuffer *b) { return b->len; }

static PyObject *ids_item(IdBuffer *b, Py_ssize_t i) {
    if (i < 0 || i >= b->len) {
        PyErr_SetString(PyExc_IndexError, "IdBuffer index out of range");
        return NULL;
    }
    return PyLong_FromUnsignedLong(b->ids[i]);
}

/* trees += iterable of ids (the Python emits add a (root, edge) tuple); all or nothing */
static PyObject *ids_inplace_concat(IdBuffer *b, PyObject *other) {
    PyObject *seq = PySequence_Fast(other, "can only extend an IdBuffer with an iterable of ids");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (ids_reserve(b, n) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (id_from(items[i], &b->ids[b->len + i]) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    b->len += n;
    Py_DECREF(seq);
    return Py_NewRef(b);
}

static PyObject *ids_append(IdBuffer *b, PyObject *o) {
    uint64_t id;
    if (id_from(o, &id) < 0 || ids_reserve(b, 1) < 0) return NULL;
    b->ids[b->len++] = id;
    Py_RETURN_NONE;
}

static PyObject *ids_repr(IdBuffer *b) {
    PyObject *list = PyList_New(b->len);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < b->len; i++) {
        PyObject *o = PyLong_FromUnsignedLong(b->ids[i]);
        if (o == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, o);
    }
    PyObject *r = PyUnicode_FromFormat("IdBuffer(%R)", list);
    Py_DECREF(list);
    return r;
}

/* Read-only, contiguous: ids of format "L" (8 bytes each) to a consumer that asks for a format,
   else bytes (itemsize 1), as the buffer protocol wants (array.frombytes asks for bytes). */
static int ids_getbuffer(IdBuffer *b, Py_buffer *view, int flags) {
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "an IdBuffer's buffer is read-only");
        view->obj = NULL;
        return -1;
    }
    const int typed = (flags & PyBUF_FORMAT) == PyBUF_FORMAT;
    const Py_ssize_t itemsize = typed ? (Py_ssize_t)sizeof(uint64_t) : 1;
    b->shape[0] = b->len * (Py_ssize_t)sizeof(uint64_t) / itemsize;
    b->strides[0] = itemsize;
    view->buf = b->ids;
    view->obj = Py_NewRef(b);
    view->len = b->len * (Py_ssize_t)sizeof(uint64_t);
    view->readonly = 1;
    view->itemsize = itemsize;
    view->format = typed ? "L" : NULL;
    view->ndim = 1;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? b->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? b->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    b->exports++;
    return 0;
}

static void ids_releasebuffer(IdBuffer *b, Py_buffer *view) { b->exports--; }

static PySequenceMethods ids_as_sequence = {
    .sq_length = (lenfunc)ids_length,
    .sq_item = (ssizeargfunc)ids_item,
    .sq_inplace_concat = (binaryfunc)ids_inplace_concat,
};

static PyBufferProcs ids_as_buffer = {
    .bf_getbuffer = (getbufferproc)ids_getbuffer,
    .bf_releasebuffer = (releasebufferproc)ids_releasebuffer,
};

static PyMethodDef ids_methods[] = {
    {"append", (PyCFunction)ids_append, METH_O, "Append one id (0 <= id < 2**64)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject IdBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rayflow._speedups.IdBuffer",
    .tp_basicsize = sizeof(IdBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = ids_new,
    .tp_dealloc = (destructor)ids_dealloc,
    .tp_repr = (reprfunc)ids_repr,
    .tp_as_sequence = &ids_as_sequence,
    .tp_as_buffer = &ids_as_buffer,
    .tp_methods = ids_methods,
    .tp_doc = "DataBatch.trees in the C build: 64-bit ids, appended raw by the kernels (see the module docstring).",
};

/* The ack of ``val`` to ``root``'s tree into its acker's mail (mails[root % len(mails)]): appended
   to mail.raw_acks as raw ids where that is an IdBuffer (flat_mail folds it), else
   acks[root] = acks.get(root, 0) ^ val in mail.acks, as the Python paths do. */
static int fold_ack(PyObject *mails, uint64_t root, uint64_t val) {
    Py_ssize_t n = PyList_GET_SIZE(mails);
    if (n == 0) { /* with ackers=0 every root is 0 and nothing is folded */
        PyErr_SetString(PyExc_RuntimeError, "an input of a tracked tree, but the topology has no acker");
        return -1;
    }
    PyObject *mail = PyList_GET_ITEM(mails, (Py_ssize_t)(root % (uint64_t)n));
    if (Py_TYPE(mail) != MailType) {
        PyErr_SetString(PyExc_TypeError, "acker mail of an unexpected type");
        return -1;
    }
    PyObject *raw = SLOT(mail, off_m_raw);
    if (raw != NULL && Py_TYPE(raw) == &IdBufferType) return ids_push2((IdBuffer *)raw, root, val);
    PyObject *acks = SLOT(mail, off_m_acks);
    if (acks == NULL || !PyDict_CheckExact(acks)) {
        PyErr_SetString(PyExc_TypeError, "AckerMail.acks is not a dict");
        return -1;
    }
    PyObject *key = PyLong_FromUnsignedLong(root);
    if (key == NULL) return -1;
    PyObject *old = PyDict_GetItemWithError(acks, key); /* borrowed */
    uint64_t o = 0;
    if (old != NULL) {
        o = PyLong_AsUnsignedLong(old);
        if (o == (uint64_t)-1 && PyErr_Occurred()) goto error;
    } else if (PyErr_Occurred())
        goto error;
    PyObject *nv = PyLong_FromUnsignedLong(o ^ val);
    if (nv == NULL) goto error;
    int r = PyDict_SetItem(acks, key, nv);
    Py_DECREF(nv);
    Py_DECREF(key);
    return r;
error:
    Py_DECREF(key);
    return -1;
}

/* -- IdReader ------------------------------------------------------------------------------ */
/* IdReader(ids): an iterator over a received payload's id array (its trees), which a bolt
   executor reads in order: the Python loops take ints from it as from iter(ids), and run_inline
   reads it raw -- no int per id it does not need, and one int for consecutive inputs of the
   same root (the words of a sentence). It holds the array's buffer while it lives (the array
   cannot be resized meanwhile: nothing appends to a received payload). */
typedef struct {
    PyObject_HEAD Py_buffer view;
    const uint64_t *ids;
    Py_ssize_t pos, n;
} IdReader;

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *source;
    if ((kwds != NULL && PyDict_GET_SIZE(kwds) != 0) || !PyArg_ParseTuple(args, "O:IdReader", &source)) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "IdReader(ids) takes one argument");
        return NULL;
    }
    IdReader *r = (IdReader *)type->tp_alloc(type, 0);
    if (r == NULL) return NULL;
    if (PyObject_GetBuffer(source, &r->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    const char *f = r->view.format ? r->view.format : "B";
    if (r->view.itemsize != 8 || (strcmp(f, "L") != 0 && strcmp(f, "Q") != 0)) {
        PyBuffer_Release(&r->view);
        r->view.obj = NULL;
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "IdReader: an array of unsigned 64-bit ids wanted");
        return NULL;
    }
    r->ids = (const uint64_t *)r->view.buf;
    r->n = r->view.len / 8;
    return (PyObject *)r;
}

static void reader_dealloc(IdReader *r) {
    if (r->view.obj != NULL) PyBuffer_Release(&r->view);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *reader_next(IdReader *r) {
    if (r->pos >= r->n) return NULL; /* StopIteration */
    return PyLong_FromUnsignedLong(r->ids[r->pos++]);
}

static PyTypeObject IdReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rayflow._speedups.IdReader",
    .tp_basicsize = sizeof(IdReader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = reader_new,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)reader_next,
    .tp_doc = "iter(ids) of a received payload's trees, which run_inline reads raw (see above).",
};

/* -- EmitKernel -------------------------------------------------------------------------- */
typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *executor, *collector, *fallback, *default_stream;
    PyObject *routes, *batches, *outbox, *metrics, *task_id;
    PyObject *executor_dict; /* its instance dict */
    InputRef input; /* where the collector keeps input */
    LastHit last_route, last_batch; /* routes[stream], _batches[task]: the last looked up */
    PyObject *returned, *returned_empty; /* the last lists emit returned (returned_copy) */
    Py_ssize_t batch_size;
    int watched; /* executor._watched when built: the executor builds its kernel again when it changes */
} EmitKernel;

/* targets.copy(), as emit returns it: the list the kernel returned last (``*last``) again where
   nothing else holds it -- the caller dropped it, as ``collector.emit([word])`` does -- and it has
   as many items, with the targets' items put in; else a new copy, which becomes ``*last``. A
   list no one else holds cannot be told from a new one. (An emit that runs while an outer emit
   of the same kernel holds its list finds it held, and copies.) */
static PyObject *returned_copy(PyObject **last, PyObject *targets) {
    Py_ssize_t n = PyList_GET_SIZE(targets);
    PyObject *ret = *last;
    if (ret != NULL && Py_REFCNT(ret) == 1 && PyList_GET_SIZE(ret) == n) {
        int ints = 1; /* the items it holds are ints (a caller may have put others in): dropping one runs no code */
        for (Py_ssize_t i = 0; i < n && ints; i++) ints = PyLong_CheckExact(PyList_GET_ITEM(ret, i));
        if (ints) {
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *old = PyList_GET_ITEM(ret, i);
                PyList_SET_ITEM(ret, i, Py_NewRef(PyList_GET_ITEM(targets, i)));
                Py_DECREF(old);
            }
            return Py_NewRef(ret);
        }
    }
    PyObject *copy = PyList_GetSlice(targets, 0, n);
    if (copy == NULL) return NULL;
    Py_XSETREF(*last, Py_NewRef(copy));
    return copy;
}

static unsigned long long n_fast, n_fallback, n_inline, n_reused; /* what ran where (counters()) */

/* if executor._watched: executor._emitted(stream, values, targets) -- the observer and the
   debug log, as the Python path calls them (after counting, before sending). */
static int watched_emit(EmitKernel *k, PyObject *stream, PyObject *values, PyObject *targets) {
    if (!k->watched) return 0;
    PyObject *r = PyObject_CallMethodObjArgs(k->executor, s_emitted_hook, stream, values, targets, NULL);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* the object references a EmitKernel holds: what the collector visits and clears */
#define EMIT_KERNEL_REFS(X) X(executor) X(collector) X(fallback) X(default_stream) X(routes) X(batches) X(outbox) X(metrics) X(task_id) X(executor_dict) X(input.dict) \
    X(last_route.key) X(last_route.value) X(last_batch.key) X(last_batch.value) X(returned) X(returned_empty)

static int kernel_traverse(EmitKernel *k, visitproc visit, void *arg) {
#define VISIT_REF(m) Py_VISIT(k->m);
    EMIT_KERNEL_REFS(VISIT_REF)
#undef VISIT_REF
    return 0;
}

static int kernel_clear(EmitKernel *k) {
#define CLEAR_REF(m) Py_CLEAR(k->m);
    EMIT_KERNEL_REFS(CLEAR_REF)
#undef CLEAR_REF
    return 0;
}

static void kernel_dealloc(EmitKernel *k) {
    PyObject_GC_UnTrack(k);
    kernel_clear(k);
    Py_TYPE(k)->tp_free((PyObject *)k);
}

static inline uint64_t next_edge(void) {
    uint64_t e;
    do e = xoshiro_next();
    while (!e);
    return e;
}

/* The targets of an emit of ``values`` (n of them) on ``route``, as the Python emits choose them:
   route.fixed where it is set; a str key's targets from route.known, else
   route.remember(value, route.choose(task_id, values)); any other key, or none,
   route.choose(task_id, values). A new reference, or NULL. */
static PyObject *route_targets(PyObject *route, Py_ssize_t key, PyObject *choose, PyObject *task_id,
                               PyObject *values, Py_ssize_t n) {
    PyObject *fixed = SLOT(route, off_r_fixed);
    if (fixed != NULL && fixed != Py_None) return Py_NewRef(fixed);
    PyObject *choose_args[2] = {task_id, values};
    if (!(key >= 0 && key < n && PyUnicode_CheckExact(PyList_GET_ITEM(values, key))))
        return PyObject_Vectorcall(choose, choose_args, 2, NULL);
    PyObject *kv = PyList_GET_ITEM(values, key);
    PyObject *known = SLOT(route, off_r_known);
    PyObject *hit = NULL;
    if (known != NULL && PyDict_CheckExact(known)) {
        hit = PyDict_GetItemWithError(known, kv);
        if (hit == NULL && PyErr_Occurred()) return NULL;
    }
    int truth = hit == NULL ? 0 : PyObject_IsTrue(hit);
    if (truth < 0) return NULL;
    if (truth) return Py_NewRef(hit);
    Py_INCREF(kv); /* choose may drop values' last reference to it */
    PyObject *chosen = PyObject_Vectorcall(choose, choose_args, 2, NULL);
    if (chosen == NULL) {
        Py_DECREF(kv);
        return NULL;
    }
    PyObject *targets = PyObject_CallMethodObjArgs(route, s_remember, kv, chosen, NULL);
    Py_DECREF(kv);
    Py_DECREF(chosen);
    return targets;
}

/* Adds ``item`` to the batch of each task of ``tasks`` (a list the caller owns, not the route's),
   switching the batch to ``rstream`` first where it holds another stream, as one more edge of
   the tree ``root`` (``root_o``, NULL when untracked: a fresh edge id per task, XORed into *val)
   or untracked (0, 0), and sends each batch that reaches ``batch_size``. The ids go into the
   batch's trees raw where it is an IdBuffer, as ints where it is a list (a batch made before the
   kernel was loaded). On an error *val holds the edges added. */
static int add_to_batches(PyObject *tasks, PyObject *batches, LastHit *last, PyObject *outbox, Py_ssize_t batch_size,
                          PyObject *rstream, PyObject *item, PyObject *root_o, uint64_t root, uint64_t *val) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tasks); i++) {
        PyObject *task = PyList_GET_ITEM(tasks, i);
        PyObject *batch = last->value; /* borrowed: ``last`` or the dict holds it */
        if (task != last->key) {
            batch = PyDict_GetItemWithError(batches, task);
            if (batch == NULL) {
                if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, task);
                return -1;
            }
            if (Py_TYPE(batch) != BatchType) {
                PyErr_SetString(PyExc_TypeError, "a batch of an unexpected type");
                return -1;
            }
            last_hit_set(last, task, batch);
        }
        if (SLOT(batch, off_b_stream) != rstream) {
            PyObject *r = PyObject_CallMethodOneArg(batch, s_switch, rstream);
            if (r == NULL) return -1;
            Py_DECREF(r);
        }
        PyObject *trees = SLOT(batch, off_b_trees), *bvalues = SLOT(batch, off_b_values);
        if (trees == NULL || bvalues == NULL || !PyList_CheckExact(bvalues)) {
            PyErr_SetString(PyExc_AttributeError, "a __slots__ member is unset");
            return -1;
        }
        if (Py_TYPE(trees) == &IdBufferType) { /* the C build's: raw ids */
            uint64_t edge = root_o != NULL ? next_edge() : 0;
            if (ids_push2((IdBuffer *)trees, root, edge) < 0) return -1;
            *val ^= edge;
        } else if (!PyList_CheckExact(trees)) {
            PyErr_SetString(PyExc_TypeError, "DataBatch.trees is neither an IdBuffer nor a list");
            return -1;
        } else if (root_o != NULL) {
            uint64_t edge = next_edge();
            PyObject *edge_o = PyLong_FromUnsignedLong(edge);
            if (edge_o == NULL) return -1;
            *val ^= edge;
            int r = PyList_Append(trees, root_o) | PyList_Append(trees, edge_o);
            Py_DECREF(edge_o);
            if (r) return -1;
        } else if (PyList_Append(trees, int_zero) | PyList_Append(trees, int_zero)) {
            return -1;
        }
        if (PyList_Append(bvalues, item)) return -1;
        if (PyList_GET_SIZE(bvalues) >= batch_size) {
            PyObject *r = PyObject_CallMethodOneArg(outbox, s_send_batch, task);
            if (r == NULL) return -1;
            Py_DECREF(r);
        }
    }
    return 0;
}

/* tup._val ^= val; an exception pending already (a send that raised) is kept, not replaced */
static int xor_into_val(PyObject *tup, uint64_t val) {
    PyObject *et, *ev, *etb;
    PyErr_Fetch(&et, &ev, &etb);
    uint64_t v = PyLong_AsUnsignedLong(SLOT(tup, off_t_val));
    PyObject *nv = (v == (uint64_t)-1 && PyErr_Occurred()) ? NULL : PyLong_FromUnsignedLong(v ^ val);
    if (nv != NULL) slot_set(tup, off_t_val, nv);
    if (et != NULL) {
        PyErr_Clear();
        PyErr_Restore(et, ev, etb);
        return -1;
    }
    return nv == NULL ? -1 : 0;
}

/* The route (borrowed) of a regular emit of the list ``values`` on ``stream``, when it is one
   the fast paths serve: a declared Route, not direct, ``values`` of its arity (a direct
   stream's emit_arity is -1), through the kernel's last route when ``stream`` is its stream
   object. 1: served; 0: to the fallback (the Python emit, which raises what is wrong); -1: an
   error is set. The route is borrowed from the dict or from ``last``, which holds it. */
static int fast_route(PyObject *routes, LastHit *last, PyObject *stream, PyObject *values, PyObject **route) {
    if (stream == last->key) {
        *route = last->value;
    } else {
        *route = PyDict_GetItemWithError(routes, stream);
        if (*route == NULL) return PyErr_Occurred() ? -1 : 0;
        if (Py_TYPE(*route) != RouteType) return 0;
        last_hit_set(last, stream, *route);
    }
    PyObject *arity_o = SLOT(*route, off_r_emit_arity);
    if (arity_o == NULL || !PyLong_CheckExact(arity_o)) return 0;
    Py_ssize_t arity = PyLong_AsSsize_t(arity_o);
    if (arity == -1 && PyErr_Occurred()) return -1;
    return arity == PyList_GET_SIZE(values);
}

static PyObject *kernel_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    EmitKernel *k = (EmitKernel *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *tup = NULL, *root_o = NULL, *targets = NULL, *result = NULL;
    if (nargs < 1 || nargs > 2) goto fallback;
    PyObject *values = args[0];
    PyObject *stream = nargs == 2 ? args[1] : k->default_stream;
    if (kwnames != NULL) { /* emit(values, stream=...) only */
        if (nargs != 1 || PyTuple_GET_SIZE(kwnames) != 1 ||
            PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0), s_stream) != 0)
            goto fallback;
        stream = args[1];
    }
    if (!PyList_CheckExact(values)) goto fallback;
    PyObject *route;
    int fast = fast_route(k->routes, &k->last_route, stream, values, &route);
    if (fast <= 0) {
        if (fast < 0) return NULL;
        goto fallback;
    }
    Py_ssize_t n = PyList_GET_SIZE(values);
    PyObject *subscribed = SLOT(route, off_r_subscribed);
    if (subscribed == Py_False) { /* nobody reads the stream: nothing to send, no tree to join */
        n_fast++;
        if (count_emitted(k->metrics) < 0) return NULL;
        result = returned_copy(&k->returned_empty, empty_list);
        if (result == NULL || watched_emit(k, stream, values, result) < 0) {
            Py_XDECREF(result);
            return NULL;
        }
        return result;
    }
    if (subscribed != Py_True) goto fallback;
    tup = input_get(k->collector, &k->input);
    if (tup == NULL) return NULL;
    if (Py_TYPE(tup) != TupleType) goto fallback; /* None, or a subclass: the general path */
    PyObject *tree_o = SLOT(tup, off_t_tree); /* borrowed: root_o owns a reference from here */
    if (tree_o == NULL || !PyLong_CheckExact(tree_o)) goto fallback; /* several trees, or acked */
    root_o = Py_NewRef(tree_o);
    PyObject *val_o = SLOT(tup, off_t_val);
    if (val_o == NULL || !PyLong_CheckExact(val_o)) goto fallback;
    uint64_t root = PyLong_AsUnsignedLong(root_o);
    if (root == (uint64_t)-1 && PyErr_Occurred()) goto error;

    /* Targets, as emit: route.fixed where set, else a str key is looked up in route.known first. */
    PyObject *key_o = SLOT(route, off_r_key);
    PyObject *choose = SLOT(route, off_r_choose);
    if (key_o == NULL || choose == NULL) goto fallback;
    Py_ssize_t key = PyLong_AsSsize_t(key_o);
    if (key == -1 && PyErr_Occurred()) goto error;
    targets = route_targets(route, key, choose, k->task_id, values, n);
    if (targets == NULL) goto error;
    n_fast++;
    if (count_emitted(k->metrics) < 0) goto error;
    if (watched_emit(k, stream, values, targets) < 0) goto error;
    if (!PyList_CheckExact(targets)) {
        PyErr_SetString(PyExc_TypeError, "a grouping chose targets that are not a list");
        goto error;
    }
    Py_ssize_t nt = PyList_GET_SIZE(targets);
    if (nt == 0) {
        result = returned_copy(&k->returned_empty, empty_list);
        goto done;
    }
    PyObject *rstream = SLOT(route, off_r_stream);
    if (rstream == NULL) goto error_attr;
    PyObject *item = SLOT(route, off_r_single) == Py_True ? PyList_GET_ITEM(values, 0) : values;
    Py_INCREF(item);
    result = returned_copy(&k->returned, targets); /* targets.copy(), taken before any send */
    if (result == NULL) {
        Py_DECREF(item);
        goto error;
    }
    uint64_t val = 0;
    int r = add_to_batches(result, k->batches, &k->last_batch, k->outbox, k->batch_size, rstream, item, root ? root_o : NULL, root, &val);
    Py_DECREF(item);
    if (root && xor_into_val(tup, val) < 0) r = -1; /* even if a send raised, as the Python leaves it */
    if (r) goto error;
done:
    Py_XDECREF(root_o);
    Py_XDECREF(tup);
    Py_XDECREF(targets);
    return result;
error_attr:
    PyErr_SetString(PyExc_AttributeError, "a __slots__ member is unset");
error:
    Py_XDECREF(root_o);
    Py_XDECREF(tup);
    Py_XDECREF(targets);
    Py_XDECREF(result);
    return NULL;
fallback:
    n_fallback++;
    Py_XDECREF(root_o);
    Py_XDECREF(tup);
    return PyObject_Vectorcall(k->fallback, args, nargsf, kwnames);
}

/* What an emit kernel caches of its executor (see the header: never rebound after
   Emitter.__init__): routes, _batches, outbox, metrics (a TaskMetrics), task_id, the executor's
   instance dict, outbox.batch_size, and whether _watched was true. New references in the
   out-parameters, set also when it fails part-way (the caller's dealloc clears them); -1 with an
   exception set on failure. */
static int read_emitter(PyObject *executor, PyObject **routes, PyObject **batches, PyObject **outbox,
                        PyObject **metrics, PyObject **task_id, PyObject **executor_dict, Py_ssize_t *batch_size,
                        int *watched) {
    *routes = PyObject_GetAttr(executor, s_routes);
    *batches = PyObject_GetAttr(executor, s_batches);
    *outbox = PyObject_GetAttr(executor, s_outbox);
    *metrics = PyObject_GetAttr(executor, s_metrics);
    *task_id = PyObject_GetAttr(executor, s_task_id);
    *executor_dict = PyObject_GenericGetDict(executor, NULL);
    if (!*routes || !*batches || !*outbox || !*metrics || !*task_id || !*executor_dict) return -1;
    if (!PyDict_CheckExact(*routes) || !PyDict_CheckExact(*batches) || !PyDict_CheckExact(*executor_dict)) {
        PyErr_SetString(PyExc_TypeError, "routes, _batches and the instance dicts must be dicts");
        return -1;
    }
    if (Py_TYPE(*metrics) != MetricsType) {
        PyErr_SetString(PyExc_TypeError, "executor.metrics is not the TaskMetrics setup() was given");
        return -1;
    }
    PyObject *w = PyObject_GetAttr(executor, s_watched);
    *watched = w == NULL ? -1 : PyObject_IsTrue(w);
    Py_XDECREF(w);
    if (*watched < 0) return -1;
    PyObject *size = PyObject_GetAttr(*outbox, s_batch_size);
    if (size == NULL) return -1;
    *batch_size = PyLong_AsSsize_t(size);
    Py_DECREF(size);
    return *batch_size == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *kernel_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"executor", "collector", "fallback", "default_stream", NULL};
    PyObject *executor, *collector, *fallback, *default_stream;
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "rayflow._speedups.setup() was not called");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOU", kwlist, &executor, &collector, &fallback,
                                     &default_stream))
        return NULL;
    EmitKernel *k = (EmitKernel *)type->tp_alloc(type, 0);
    if (k == NULL) return NULL;
    k->vectorcall = kernel_call;
    k->executor = Py_NewRef(executor);
    k->collector = Py_NewRef(collector);
    k->fallback = Py_NewRef(fallback);
    k->default_stream = Py_NewRef(default_stream);
    if (read_emitter(executor, &k->routes, &k->batches, &k->outbox, &k->metrics, &k->task_id, &k->executor_dict,
                     &k->batch_size, &k->watched) < 0)
        goto error;
    if (input_ref(collector, &k->input) < 0) goto error;
    return (PyObject *)k;
error:
    Py_DECREF(k);
    return NULL;
}

static PyTypeObject EmitKernelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rayflow._speedups.EmitKernel",
    .tp_basicsize = sizeof(EmitKernel),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(EmitKernel, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = kernel_new,
    .tp_dealloc = (destructor)kernel_dealloc,
    .tp_traverse = (traverseproc)kernel_traverse,
    .tp_clear = (inquiry)kernel_clear,
    .tp_doc = "BoltExecutor.emit_input's fast path in C (see the module docstring).",
};

/* -- SpoutEmit --------------------------------------------------------------------------- */
typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *executor, *fallback, *default_stream;
    PyObject *routes, *batches, *outbox, *metrics, *task_id, *pending;
    PyObject *executor_dict, *outbox_dict, *pending_dict; /* their instance dicts */
    LastHit last_route, last_batch; /* routes[stream], _batches[task]: the last looked up */
    Py_ssize_t batch_size;
    int watched; /* executor._watched when built: the executor builds its emit again when it changes */
} SpoutEmit;

static unsigned long long n_spout_fast, n_spout_fallback;

/* the object references a SpoutEmit holds: what the collector visits and clears */
#define SPOUT_EMIT_REFS(X) X(executor) X(fallback) X(default_stream) X(routes) X(batches) X(outbox) X(metrics) X(task_id) X(pending) X(executor_dict) X(outbox_dict) X(pending_dict) \
    X(last_route.key) X(last_route.value) X(last_batch.key) X(last_batch.value)

static int spout_traverse(SpoutEmit *k, visitproc visit, void *arg) {
#define VISIT_REF(m) Py_VISIT(k->m);
    SPOUT_EMIT_REFS(VISIT_REF)
#undef VISIT_REF
    return 0;
}

static int spout_clear(SpoutEmit *k) {
#define CLEAR_REF(m) Py_CLEAR(k->m);
    SPOUT_EMIT_REFS(CLEAR_REF)
#undef CLEAR_REF
    return 0;
}

static void spout_dealloc(SpoutEmit *k) {
    PyObject_GC_UnTrack(k);
    spout_clear(k);
    Py_TYPE(k)->tp_free((PyObject *)k);
}

/* obj.append(item): a list's in C, anything else's by its method */
static int append_to(PyObject *seq, PyObject *item) {
    if (PyList_CheckExact(seq)) return PyList_Append(seq, item);
    PyObject *r = PyObject_CallMethodOneArg(seq, s_append, item);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* A new tree's root: executor.root_bits(64) or anchoring.new_id() (a new reference, or NULL).
   Where root_bits is anchoring.getrandbits, the default (a generator seeded from os.urandom, as
   the kernel's own is), the kernel draws the bits itself: any 64 random bits but 0 will do, and a
   call of the generator costs more than the rest of the emit's bookkeeping of the root. A seeded
   root_bits (the in-process runner's) is called, so that a run repeats. */
static PyObject *default_root_bits; /* anchoring.getrandbits, once looked up */

static PyObject *draw_root(SpoutEmit *k, uint64_t *root) {
    PyObject *bits = dict_attr(k->executor_dict, s_root_bits);
    if (bits == NULL) return NULL;
    if (default_root_bits == NULL) {
        PyObject *anchoring = PyImport_ImportModule("rayflow._acking.anchoring");
        if (anchoring == NULL) {
            Py_DECREF(bits);
            return NULL;
        }
        default_root_bits = PyObject_GetAttrString(anchoring, "getrandbits");
        Py_DECREF(anchoring);
        if (default_root_bits == NULL) {
            Py_DECREF(bits);
            return NULL;
        }
    }
    if (bits == default_root_bits) {
        Py_DECREF(bits);
        *root = next_edge();
        return PyLong_FromUnsignedLong(*root);
    }
    PyObject *root_o = PyObject_CallOneArg(bits, int_64);
    Py_DECREF(bits);
    if (root_o == NULL) return NULL;
    if (!PyLong_CheckExact(root_o)) {
        PyErr_SetString(PyExc_TypeError, "root_bits(64) returned something other than an int");
        Py_DECREF(root_o);
        return NULL;
    }
    *root = PyLong_AsUnsignedLong(root_o);
    if (*root == (uint64_t)-1 && PyErr_Occurred()) {
        Py_DECREF(root_o);
        return NULL;
    }
    if (*root == 0) { /* once in 2**64: anchoring.new_id(), as the Python does */
        Py_DECREF(root_o);
        PyObject *anchoring = PyImport_ImportModule("rayflow._acking.anchoring");
        if (anchoring == NULL) return NULL;
        root_o = PyObject_CallMethodNoArgs(anchoring, s_new_id);
        Py_DECREF(anchoring);
        if (root_o == NULL) return NULL;
        *root = PyLong_AsUnsignedLong(root_o);
        if (*root == (uint64_t)-1 && PyErr_Occurred()) {
            Py_DECREF(root_o);
            return NULL;
        }
    }
    return root_o;
}

/* What a tracked emit leaves once its tuples are in their batches: the tree's init in its acker's
   mail, the tree pending, its start time if sampled for latency, and the exactly-once record. */
static int start_tree(SpoutEmit *k, PyObject *root_o, uint64_t root, uint64_t val, PyObject *msg_id) {
    PyObject *mails = PyDict_GetItemWithError(k->outbox_dict, s_acker_mails); /* borrowed */
    if (mails == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, s_acker_mails);
        return -1;
    }
    if (!PyList_CheckExact(mails) || PyList_GET_SIZE(mails) == 0) {
        PyErr_SetString(PyExc_RuntimeError, "a tracked tree, but the spout has no acker mail");
        return -1;
    }
    PyObject *mail = PyList_GET_ITEM(mails, (Py_ssize_t)(root % (uint64_t)PyList_GET_SIZE(mails)));
    PyObject *inits = Py_TYPE(mail) == MailType ? SLOT(mail, off_m_inits) : NULL;
    if (inits == NULL || !PyDict_CheckExact(inits)) {
        PyErr_SetString(PyExc_TypeError, "AckerMail.inits is not a dict");
        return -1;
    }
    PyObject *val_o = PyLong_FromUnsignedLong(val);
    if (val_o == NULL) return -1;
    int r = PyDict_SetItem(inits, root_o, val_o);
    Py_DECREF(val_o);
    if (r < 0) return -1;
    PyObject *newest = PyDict_GetItemWithError(k->pending_dict, s_newest); /* borrowed */
    if (newest == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, s_newest);
        return -1;
    }
    if (PyObject_SetItem(newest, root_o, msg_id) < 0) return -1;
    if (!(root & LATENCY_SAMPLE_MASK)) { /* self._started[root] = time.perf_counter() */
        PyObject *started = dict_attr(k->executor_dict, s_started);
        if (started == NULL) return -1;
        PyObject *now = PyObject_CallMethodNoArgs(time_module, s_perf_counter);
        r = now == NULL ? -1 : PyObject_SetItem(started, root_o, now);
        Py_XDECREF(now);
        Py_DECREF(started);
        if (r < 0) return -1;
    }
    PyObject *cut = PyDict_GetItemWithError(k->executor_dict, s_cut); /* borrowed */
    if (cut == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, s_cut);
        return -1;
    }
    if (cut != Py_None) { /* self._cut.epoch.append((root, msg_id)) */
        PyObject *epoch = PyObject_GetAttr(cut, s_epoch);
        if (epoch == NULL) return -1;
        PyObject *pair = PyTuple_Pack(2, root_o, msg_id);
        r = pair == NULL ? -1 : append_to(epoch, pair);
        Py_XDECREF(pair);
        Py_DECREF(epoch);
        if (r < 0) return -1;
    }
    return 0;
}

/* SpoutOutputCollector.emit(values, msg_id=None, stream="default") as SpoutExecutor.emit runs it */
static PyObject *spout_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    SpoutEmit *k = (SpoutEmit *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *targets = NULL, *result = NULL, *root_o = NULL;
    if (nargs < 1 || nargs > 3) goto fallback;
    PyObject *values = args[0];
    PyObject *msg_id = nargs >= 2 ? args[1] : Py_None;
    PyObject *stream = nargs == 3 ? args[2] : k->default_stream;
    if (kwnames != NULL) { /* msg_id= and stream=, each once */
        int have_msg_id = nargs >= 2, have_stream = nargs == 3;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i);
            if (!have_msg_id && (name == s_msg_id || PyUnicode_Compare(name, s_msg_id) == 0)) {
                msg_id = args[nargs + i];
                have_msg_id = 1;
            } else if (!have_stream && (name == s_stream || PyUnicode_Compare(name, s_stream) == 0)) {
                stream = args[nargs + i];
                have_stream = 1;
            } else {
                goto fallback;
            }
        }
    }
    if (!PyList_CheckExact(values) || !PyUnicode_CheckExact(stream)) goto fallback;
    PyObject *route;
    int fast = fast_route(k->routes, &k->last_route, stream, values, &route);
    if (fast <= 0) {
        if (fast < 0) return NULL;
        goto fallback;
    }
    Py_ssize_t n = PyList_GET_SIZE(values);
    PyObject *subscribed = SLOT(route, off_r_subscribed);
    PyObject *key_o = SLOT(route, off_r_key), *choose = SLOT(route, off_r_choose);
    PyObject *rstream = SLOT(route, off_r_stream), *single = SLOT(route, off_r_single);
    if ((subscribed != Py_True && subscribed != Py_False) || key_o == NULL || !PyLong_CheckExact(key_o) ||
        choose == NULL || rstream == NULL || single == NULL)
        goto fallback;
    Py_ssize_t key = PyLong_AsSsize_t(key_o);
    if (key == -1 && PyErr_Occurred()) return NULL;

    /* From here on, what SpoutExecutor.emit does, in its order. */
    targets = subscribed == Py_True ? route_targets(route, key, choose, k->task_id, values, n) : PyList_New(0);
    if (targets == NULL) return NULL;
    if (!PyList_CheckExact(targets)) {
        PyErr_SetString(PyExc_TypeError, "a grouping chose targets that are not a list");
        goto error;
    }
    n_spout_fast++;
    PyObject *exhausted = PyDict_GetItemWithError(k->executor_dict, s_exhausted); /* borrowed */
    if (exhausted == NULL && PyErr_Occurred()) goto error;
    if (exhausted != Py_False && PyDict_SetItem(k->executor_dict, s_exhausted, Py_False) < 0) goto error;
    if (count_emitted(k->metrics) < 0) goto error;
    if (k->watched) { /* the observer and the debug log: executor._emitted(stream, values, targets, msg_id) */
        PyObject *r = PyObject_CallMethodObjArgs(k->executor, s_emitted_hook, stream, values, targets, msg_id, NULL);
        if (r == NULL) goto error;
        Py_DECREF(r);
    }
    uint64_t root = 0;
    if (msg_id != Py_None) {
        PyObject *tracking = PyDict_GetItemWithError(k->executor_dict, s_tracking); /* borrowed */
        if (tracking == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, s_tracking);
            goto error;
        }
        int is_tracking = PyObject_IsTrue(tracking);
        if (is_tracking < 0) goto error;
        if (is_tracking) {
            root_o = draw_root(k, &root);
            if (root_o == NULL) goto error;
        } else { /* no acker: acked when next_tuple returns */
            PyObject *acked = dict_attr(k->executor_dict, s_acked_at_emit);
            int r = acked == NULL ? -1 : append_to(acked, msg_id);
            Py_XDECREF(acked);
            if (r < 0) goto error;
        }
    }
    result = PyList_GetSlice(targets, 0, PyList_GET_SIZE(targets)); /* targets.copy(), taken before any send */
    if (result == NULL) goto error;
    uint64_t val = 0;
    PyObject *item = single == Py_True ? PyList_GET_ITEM(values, 0) : values;
    Py_INCREF(item);
    int r = add_to_batches(result, k->batches, &k->last_batch, k->outbox, k->batch_size, rstream, item, root_o, root, &val);
    Py_DECREF(item);
    if (r < 0) goto error;
    if (root_o != NULL && start_tree(k, root_o, root, val, msg_id) < 0) goto error;
    Py_XDECREF(root_o);
    Py_DECREF(targets);
    return result;
error:
    Py_XDECREF(root_o);
    Py_XDECREF(targets);
    Py_XDECREF(result);
    return NULL;
fallback:
    n_spout_fallback++;
    return PyObject_Vectorcall(k->fallback, args, nargsf, kwnames);
}

static PyObject *spout_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"executor", "fallback", "default_stream", NULL};
    PyObject *executor, *fallback, *default_stream;
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "rayflow._speedups.setup() was not called");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOU", kwlist, &executor, &fallback, &default_stream)) return NULL;
    SpoutEmit *k = (SpoutEmit *)type->tp_alloc(type, 0);
    if (k == NULL) return NULL;
    k->vectorcall = spout_call;
    k->executor = Py_NewRef(executor);
    k->fallback = Py_NewRef(fallback);
    k->default_stream = Py_NewRef(default_stream);
    if (read_emitter(executor, &k->routes, &k->batches, &k->outbox, &k->metrics, &k->task_id, &k->executor_dict,
                     &k->batch_size, &k->watched) < 0)
        goto error;
    k->pending = PyObject_GetAttr(executor, s_pending);
    k->outbox_dict = PyObject_GenericGetDict(k->outbox, NULL);
    k->pending_dict = k->pending ? PyObject_GenericGetDict(k->pending, NULL) : NULL;
    if (!k->pending || !k->outbox_dict || !k->pending_dict) goto error;
    if (!PyDict_CheckExact(k->outbox_dict) || !PyDict_CheckExact(k->pending_dict)) {
        PyErr_SetString(PyExc_TypeError, "routes, _batches and the instance dicts must be dicts");
        goto error;
    }
    return (PyObject *)k;
error:
    Py_DECREF(k);
    return NULL;
}

static PyTypeObject SpoutEmitType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rayflow._speedups.SpoutEmit",
    .tp_basicsize = sizeof(SpoutEmit),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(SpoutEmit, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = spout_new,
    .tp_dealloc = (destructor)spout_dealloc,
    .tp_traverse = (traverseproc)spout_traverse,
    .tp_clear = (inquiry)spout_clear,
    .tp_doc = "SpoutOutputCollector.emit's fast path in C: SpoutExecutor.emit (see the module docstring).",
};

/* -- run_inline -------------------------------------------------------------------------- */
static PyObject *run_inline(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "run_inline takes 9 arguments");
        return NULL;
    }
    PyObject *task = args[0], *execute = args[1], *collector = args[2], *mails = args[3], *column = args[4],
             *trees = args[5], *source = args[6], *joined = args[7], *on_error = args[8];
    if (!ready || !PyList_CheckExact(mails) || !PyList_CheckExact(column) || /* no mails: ackers=0 */
        !PyIter_Check(trees) || Py_TYPE(source) != SourceType) {
        PyErr_SetString(PyExc_TypeError, "run_inline: unexpected arguments");
        return NULL;
    }
    /* A one-field source's inputs come as the bare values (DataPayload): each gets its list here. */
    PyObject *fields = SLOT(source, off_s_fields);
    if (fields == NULL) {
        PyErr_SetString(PyExc_AttributeError, "TupleSource.fields is unset");
        return NULL;
    }
    Py_ssize_t n_fields = PyObject_Size(fields);
    if (n_fields < 0) return NULL;
    const int single = n_fields == 1;
    Py_ssize_t failed = 0;
    uint64_t last_root = 0, last_val = 0;
    n_inline++;
    InputRef in; /* where collector.input lives */
    if (input_ref(collector, &in) < 0) {
        Py_XDECREF(in.dict);
        return NULL;
    }
    PyObject *tup = NULL, *root_o = NULL, *val_o = NULL, *values = NULL;
    PyObject *spare = NULL; /* the last input's Tuple, which nothing but collector.input held: reused */
    IdReader *raw = Py_TYPE(trees) == &IdReaderType ? (IdReader *)trees : NULL;
    PyObject *last_root_o = NULL; /* raw: the int of root ``cached``, for the next input of that root */
    uint64_t root = 0, val = 0, cached = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(column); i++) {
        PyObject *item = PyList_GET_ITEM(column, i);
        if (raw != NULL) {
            if (raw->n - raw->pos < 2) break;
            root = raw->ids[raw->pos];
            val = raw->ids[raw->pos + 1];
            raw->pos += 2;
            if (last_root_o == NULL || cached != root) {
                Py_XSETREF(last_root_o, PyLong_FromUnsignedLong(root));
                if (last_root_o == NULL) goto error;
                cached = root;
            }
            root_o = Py_NewRef(last_root_o);
            val_o = PyLong_FromUnsignedLong(val);
            if (val_o == NULL) goto error;
        } else {
            root_o = PyIter_Next(trees);
            if (root_o == NULL) {
                if (PyErr_Occurred()) goto error;
                break;
            }
            val_o = PyIter_Next(trees);
            if (val_o == NULL) {
                if (PyErr_Occurred()) goto error;
                Py_CLEAR(root_o);
                break;
            }
            root = PyLong_AsUnsignedLong(root_o);
            if (root == (uint64_t)-1 && PyErr_Occurred()) goto error;
            int truth = PyObject_IsTrue(val_o);
            if (truth < 0) goto error;
            val = (uint64_t)truth; /* only its truth is read below */
        }
        PyObject *old_values = spare != NULL ? SLOT(spare, off_t_values) : NULL;
        if (single && old_values != NULL && PyList_CheckExact(old_values) && Py_REFCNT(old_values) == 1 &&
            PyList_GET_SIZE(old_values) == 1) {
            /* the spare Tuple's list, which nothing else holds either: refilled, as the Tuple is */
            PyObject *previous = PyList_GET_ITEM(old_values, 0);
            PyList_SET_ITEM(old_values, 0, Py_NewRef(item));
            Py_DECREF(previous);
            values = Py_NewRef(old_values);
        } else if (single) {
            values = PyList_New(1);
            if (values == NULL) goto error;
            PyList_SET_ITEM(values, 0, Py_NewRef(item));
        } else {
            values = Py_NewRef(item);
        }
        int val_true = val != 0;
        if (root || !val_true) { /* Tuple(values, source, root, val), slots written directly */
            if (spare != NULL) { /* no one can tell it from a new one: nothing else refers to it */
                n_reused++;
                tup = spare;
                spare = NULL;
                slot_set(tup, off_t_values, values); /* stolen */
                values = NULL;
                slot_set(tup, off_t_source, Py_NewRef(source));
                slot_set(tup, off_t_tree, Py_NewRef(root_o));
                slot_set(tup, off_t_val, Py_NewRef(val_o));
            } else {
                tup = TupleType->tp_alloc(TupleType, 0);
                if (tup == NULL) goto error;
                SLOT(tup, off_t_values) = values; /* stolen */
                values = NULL;
                SLOT(tup, off_t_source) = Py_NewRef(source);
                SLOT(tup, off_t_tree) = Py_NewRef(root_o);
                SLOT(tup, off_t_val) = Py_NewRef(val_o);
            }
        } else { /* in several trees: Tuple(values, source, joined[val - 1]) */
            Py_ssize_t j = PyLong_AsSsize_t(val_o);
            if (j == -1 && PyErr_Occurred()) goto error;
            PyObject *tree = PySequence_GetItem(joined, j - 1);
            if (tree == NULL) goto error;
            tup = PyObject_CallFunctionObjArgs((PyObject *)TupleType, values, source, tree, NULL);
            Py_DECREF(tree);
            Py_CLEAR(values);
            if (tup == NULL) goto error;
        }
        if (input_set(collector, &in, tup) < 0) goto error;
        PyObject *call_args[2] = {tup, collector};
        PyObject *r = PyObject_Vectorcall(execute, call_args, 2, NULL);
        if (r == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) goto error; /* KeyboardInterrupt & co. */
            PyObject *et, *ev, *etb;
            PyErr_Fetch(&et, &ev, &etb);
            PyErr_NormalizeException(&et, &ev, &etb);
            if (etb != NULL) PyException_SetTraceback(ev, etb);
            Py_XDECREF(et);
            Py_XDECREF(etb);
            PyObject *h = PyObject_CallFunctionObjArgs(on_error, tup, ev, NULL);
            Py_XDECREF(ev);
            if (h == NULL) goto error;
            Py_DECREF(h);
            failed++;
        } else {
            Py_DECREF(r);
            /* It returned: ack it (its tree is still root, or joined[val - 1]). */
            if (root) {
                PyObject *v_o = SLOT(tup, off_t_val);
                uint64_t v = v_o ? PyLong_AsUnsignedLong(v_o) : 0;
                if (v == (uint64_t)-1 && PyErr_Occurred()) goto error;
                if (root == last_root) {
                    last_val ^= v;
                } else {
                    if (last_root && fold_ack(mails, last_root, last_val) < 0) goto error;
                    last_root = root;
                    last_val = v;
                }
                slot_set(tup, off_t_tree, Py_NewRef(Py_None));
            } else if (val_true) {
                PyObject *a = PyObject_CallMethodOneArg(task, s_ack_trees, tup);
                if (a == NULL) goto error;
                Py_DECREF(a);
            } else {
                slot_set(tup, off_t_tree, Py_NewRef(Py_None));
            }
        }
        /* Held by us and collector.input only (a Tuple takes no weak reference): the next input's */
        if (spare == NULL && Py_REFCNT(tup) == 2 && Py_TYPE(tup) == TupleType &&
            input_peek(collector, &in) == tup) {
            spare = tup;
            tup = NULL;
        } else {
            Py_CLEAR(tup);
        }
        Py_CLEAR(root_o);
        Py_CLEAR(val_o);
    }
    Py_CLEAR(spare);
    Py_CLEAR(last_root_o);
    if (last_root && fold_ack(mails, last_root, last_val) < 0) goto error;
    if (input_set(collector, &in, Py_None) < 0) goto error;
    Py_XDECREF(in.dict);
    return PyLong_FromSsize_t(failed);
error:
    Py_XDECREF(in.dict);
    Py_XDECREF(last_root_o);
    Py_XDECREF(spare);
    Py_XDECREF(tup);
    Py_XDECREF(root_o);
    Py_XDECREF(val_o);
    Py_XDECREF(values);
    return NULL;
}

static PyObject *counters(PyObject *mod, PyObject *unused) {
    return Py_BuildValue("{sKsKsKsKsKsKsKsK}", "emit_fast", n_fast, "emit_fallback", n_fallback, "run_inline", n_inline,
                         "tuples_reused", n_reused,
                         "spout_emit_fast", n_spout_fast, "spout_emit_fallback", n_spout_fallback, "getitem_fast",
                         n_getitem_fast, "getitem_fallback", n_getitem_fallback);
}

/* -- AckerMail's wire form --------------------------------------------------------------- */
/* Appends ``key, value`` of each pair of ``pairs`` (a dict of ints in [0, 2**64)) to ``out`` as
   raw ids, each value XORed with ``fold[key]`` where ``fold`` (NULL: none) has the key, counted
   in *folded; with ``skip`` (NULL: none), the pairs whose key it has are left out. */
static int flat_pairs(PyObject *pairs, PyObject *fold, PyObject *skip, IdBuffer *out, Py_ssize_t *folded) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(pairs, &pos, &k, &v)) {
        if (skip != NULL) {
            int has = PyDict_Contains(skip, k);
            if (has < 0) return -1;
            if (has) continue;
        }
        uint64_t key = PyLong_AsUnsignedLong(k), value = PyLong_AsUnsignedLong(v);
        if ((key == (uint64_t)-1 || value == (uint64_t)-1) && PyErr_Occurred()) return -1;
        if (fold != NULL) {
            PyObject *f = PyDict_GetItemWithError(fold, k); /* borrowed */
            if (f != NULL) {
                uint64_t x = PyLong_AsUnsignedLong(f);
                if (x == (uint64_t)-1 && PyErr_Occurred()) return -1;
                value ^= x;
                (*folded)++;
            } else if (PyErr_Occurred())
                return -1;
        }
        if (ids_push2(out, key, value) < 0) return -1;
    }
    return 0;
}

/* The pairs of ``raw`` (root, value, root, value, ...) with one pair per root, the values of a
   root XORed together, in the order each root first came: a new IdBuffer, or NULL. An open-
   addressing table of indexes into the result, twice the pairs' count or more, finds a root's
   pair. */
static IdBuffer *fold_raw(IdBuffer *raw) {
    Py_ssize_t pairs = raw->len / 2, size = 16;
    while (size < 2 * pairs) size *= 2;
    Py_ssize_t *table = PyMem_Calloc((size_t)size, sizeof(Py_ssize_t)); /* 0: empty, else index + 1 */
    IdBuffer *out = (IdBuffer *)PyObject_CallNoArgs((PyObject *)&IdBufferType);
    if (table == NULL || out == NULL || ids_reserve(out, 2 * pairs) < 0) {
        PyMem_Free(table);
        Py_XDECREF(out);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < pairs; i++) {
        uint64_t root = raw->ids[2 * i], val = raw->ids[2 * i + 1];
        uint64_t h = root * 0x9E3779B97F4A7C15ULL; /* roots are random already: spread the high bits */
        Py_ssize_t at = (Py_ssize_t)(h >> 32) & (size - 1);
        while (table[at] != 0 && out->ids[2 * (table[at] - 1)] != root) at = (at + 1) & (size - 1);
        if (table[at] != 0) {
            out->ids[2 * (table[at] - 1) + 1] ^= val;
        } else {
            table[at] = out->len / 2 + 1;
            out->ids[out->len++] = root;
            out->ids[out->len++] = val;
        }
    }
    PyMem_Free(table);
    return out;
}

/* flat_mail(inits, acks, raw_acks) -> (IdBuffer, IdBuffer): AckerMail.take's two id arrays, flat
   ``root, value`` pairs: each init, in the order of ``inits``, with every ack of its root folded
   in (from ``acks`` and from ``raw_acks``, the kernel's raw pairs: what the acker would make of
   the init and then the acks); then the acks of other roots, those of ``acks`` in its order and
   then those of ``raw_acks`` in theirs -- one pair per root: a raw ack of a root ``acks`` has
   folds into that, and raw acks of one root into one (fold_raw). The dicts may be changed (the
   mail is reset after); ``raw_acks`` is left as it was. */
static PyObject *flat_mail(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyDict_CheckExact(args[0]) || !PyDict_CheckExact(args[1]) ||
        Py_TYPE(args[2]) != &IdBufferType) {
        PyErr_SetString(PyExc_TypeError, "flat_mail(inits: dict, acks: dict, raw_acks: IdBuffer)");
        return NULL;
    }
    PyObject *inits = args[0], *acks = args[1];
    IdBuffer *raw = (IdBuffer *)args[2];
    IdBuffer *flat_inits = (IdBuffer *)PyObject_CallNoArgs((PyObject *)&IdBufferType);
    IdBuffer *flat_acks = (IdBuffer *)PyObject_CallNoArgs((PyObject *)&IdBufferType);
    IdBuffer *rest = NULL; /* the raw acks of roots without an init here */
    Py_ssize_t folded = 0;
    if (flat_inits == NULL || flat_acks == NULL) goto error;
    if (raw->len > 0) {
        rest = fold_raw(raw);
        if (rest == NULL) goto error;
        if (PyDict_GET_SIZE(inits) > 0 || PyDict_GET_SIZE(acks) > 0) {
            /* a root of the raw acks with an init here folds into it, or else into the ack of its
               root in ``acks``; the others stay in ``rest`` */
            Py_ssize_t kept = 0;
            for (Py_ssize_t i = 0; i + 1 < rest->len; i += 2) {
                uint64_t root = rest->ids[i], val = rest->ids[i + 1];
                PyObject *key = PyLong_FromUnsignedLong(root);
                if (key == NULL) goto error;
                PyObject *into = inits, *have = PyDict_GetItemWithError(inits, key); /* borrowed */
                if (have == NULL && !PyErr_Occurred() && PyDict_GET_SIZE(acks) > 0) {
                    into = acks;
                    have = PyDict_GetItemWithError(acks, key);
                }
                int r = 0;
                if (have != NULL) {
                    uint64_t x = PyLong_AsUnsignedLong(have);
                    PyObject *nv = x == (uint64_t)-1 && PyErr_Occurred() ? NULL : PyLong_FromUnsignedLong(x ^ val);
                    r = nv == NULL ? -1 : PyDict_SetItem(into, key, nv);
                    Py_XDECREF(nv);
                } else if (PyErr_Occurred()) {
                    r = -1;
                } else {
                    rest->ids[kept++] = root;
                    rest->ids[kept++] = val;
                }
                Py_DECREF(key);
                if (r < 0) goto error;
            }
            rest->len = kept;
        }
    }
    int some_acks = PyDict_GET_SIZE(acks) > 0;
    if (flat_pairs(inits, some_acks ? acks : NULL, NULL, flat_inits, &folded) < 0) goto error;
    if (folded < PyDict_GET_SIZE(acks) &&
        flat_pairs(acks, NULL, folded ? inits : NULL, flat_acks, &folded) < 0)
        goto error;
    IdBuffer *tail = rest != NULL ? rest : raw;
    if (tail->len > 0) {
        if (ids_reserve(flat_acks, tail->len) < 0) goto error;
        memcpy(flat_acks->ids + flat_acks->len, tail->ids, (size_t)tail->len * sizeof(uint64_t));
        flat_acks->len += tail->len;
    }
    Py_XDECREF(rest);
    return Py_BuildValue("(NN)", flat_inits, flat_acks);
error:
    Py_XDECREF(flat_inits);
    Py_XDECREF(flat_acks);
    Py_XDECREF(rest);
    return NULL;
}

/* -- ValueColumn's wire form ------------------------------------------------------------- */
/* join_strings(values, sep) -> str | None: sep.join(values) where every value is a str, not a
   subclass (which the joined string would lose), and sep occurs in none of them (the joined
   string holds it len(values) - 1 times); None otherwise, and for no values. ValueColumn's
   check, which in Python takes a type() call per value. Nothing runs Python code between the
   check and the join, so the values checked are the values joined. */
static PyObject *join_strings(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyList_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "join_strings(values: list, sep: str)");
        return NULL;
    }
    PyObject *values = args[0], *sep = args[1];
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (n == 0) Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(values, i))) Py_RETURN_NONE;
    PyObject *joined = PyUnicode_Join(sep, values);
    if (joined == NULL) return NULL;
    Py_ssize_t seps = PyUnicode_Count(joined, sep, 0, PY_SSIZE_T_MAX);
    if (seps == n - 1) return joined;
    Py_DECREF(joined);
    if (seps < 0) return NULL;
    Py_RETURN_NONE;
}

/* -- module ------------------------------------------------------------------------------ */
static PyMethodDef methods[] = {
    {"flat_mail", (PyCFunction)(void (*)(void))flat_mail, METH_FASTCALL,
     "flat_mail(inits, acks, raw_acks) -> (IdBuffer, IdBuffer): AckerMail.take's id arrays, acks folded into inits"},
    {"join_strings", (PyCFunction)(void (*)(void))join_strings, METH_FASTCALL,
     "join_strings(values, sep) -> str | None: ValueColumn's joined form, or None where it has none"},
    {"counters", counters, METH_NOARGS, "How many emits ran in C, how many fell back; run_inline calls."},
    {"setup", setup, METH_VARARGS, "setup(Tuple, TupleSource, DataBatch, Route, AckerMail, seed: bytes)"},
    {"run_inline", (PyCFunction)(void (*)(void))run_inline, METH_FASTCALL,
     "run_inline(task, execute, collector, mails, column, trees, source, joined, on_error) -> failed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "rayflow._speedups", NULL, -1, methods};

#define INTERN(var, text)                                 \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL;

PyMODINIT_FUNC PyInit__speedups(void) {
    if ((int_zero = PyLong_FromLong(0)) == NULL || (int_one = PyLong_FromLong(1)) == NULL ||
        (empty_list = PyList_New(0)) == NULL)
        return NULL;
    INTERN(s_watched, "_watched");
    INTERN(s_emitted_hook, "_emitted");
    INTERN(s_stream, "stream");
    INTERN(s_input, "input");
    INTERN(s_emitted, "python_emits");
    INTERN(s_switch, "switch");
    INTERN(s_remember, "remember");
    INTERN(s_send_batch, "send_batch");
    INTERN(s_ack_trees, "ack_trees");
    INTERN(s_routes, "routes");
    INTERN(s_batches, "_batches");
    INTERN(s_outbox, "outbox");
    INTERN(s_batch_size, "batch_size");
    INTERN(s_metrics, "metrics");
    INTERN(s_task_id, "task_id");
    INTERN(s_msg_id, "msg_id");
    INTERN(s_exhausted, "exhausted");
    INTERN(s_tracking, "tracking");
    INTERN(s_root_bits, "root_bits");
    INTERN(s_new_id, "new_id");
    INTERN(s_acked_at_emit, "_acked_at_emit");
    INTERN(s_append, "append");
    INTERN(s_acker_mails, "acker_mails");
    INTERN(s_newest, "newest");
    INTERN(s_started, "_started");
    INTERN(s_perf_counter, "perf_counter");
    INTERN(s_cut, "_cut");
    INTERN(s_epoch, "epoch");
    INTERN(s_pending, "pending");
    if ((int_64 = PyLong_FromLong(64)) == NULL || (time_module = PyImport_ImportModule("time")) == NULL) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    /* each type under the last part of its tp_name (PyModule_AddType readies it too) */
    PyTypeObject *const types[] = {&EmitKernelType, &SpoutEmitType, &IdBufferType, &IdReaderType, &EmitCountType};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (PyModule_AddType(m, types[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
