/* rayflow._speedups: a hand-written C kernel for the two per-tuple loops of a BasicBolt -- its
 * emit and its run loop -- against the CPython C API (3.10 and later, not the limited API, not
 * free-threaded). Optional: setup.py builds it on install when a C compiler and Python's headers
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
 *       (looked up in executor.routes per call). Anything off the fast path -- an undeclared or
 *       direct stream, a wrong arity, no input, an input in several trees or acked already,
 *       keyword arguments other than ``stream``, values that are not a list -- is handed whole
 *       to ``fallback`` (BoltExecutor.emit_input, which dispatches to the Python emits), before
 *       any side effect. An observer or the debug log (executor._watched) is served in C by
 *       calling executor._emitted, as the Python emits do.
 *   run_inline(task, execute, collector, mails, column, trees, source, joined, on_error) -> int
 *       The loop of BasicBoltAdapter.run_inline: builds each Tuple (a one-field source's inputs
 *       come as the bare values and are put in a list of one here, as the Python loop does),
 *       sets collector.input, calls execute, folds acks per root into the acker mails; an
 *       exception that is an Exception is handed to on_error(tup, exc) (which reports unless
 *       FailedException, and fails), anything else propagates.
 *   counters() -> {"emit_fast": n, "emit_fallback": n, "run_inline": n}
 *       What ran where: a test asserts that the fast paths were taken.
 *   setup(Tuple, TupleSource, DataBatch, Route, AckerMail, seed)
 *       Once, at import: finds the __slots__ member descriptors of those classes and keeps
 *       their offsets, so that the kernels read and write slots directly (no getattr), and
 *       seeds the edge-id generator from 32 bytes (os.urandom). A slot renamed since raises
 *       TypeError here, naming it, and the kernel stays unusable (the loader runs Python).
 *
 * Edge ids: 64 random bits, never 0 (redrawn), from xoshiro256** (like anchoring's generator,
 * not reseeded on fork).
 *
 * The kernel caches what BoltExecutor never rebinds after Emitter.__init__: routes, _batches,
 * outbox, outbox.batch_size, metrics, task_id. It reads executor._watched and collector.input
 * on every call (both change while a task runs), and counts metrics.emitted, in the instance
 * dicts of the executor, the collector and the metrics, taken once (PyObject_GenericGetDict,
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

static PyTypeObject *TupleType, *SourceType, *BatchType, *RouteType, *MailType;
static Py_ssize_t off_t_values, off_t_source, off_t_tree, off_t_val, off_s_fields;
static Py_ssize_t off_r_stream, off_r_emit_arity, off_r_single, off_r_subscribed, off_r_key, off_r_known,
    off_r_choose;
static Py_ssize_t off_b_values, off_b_trees, off_b_stream;
static Py_ssize_t off_m_acks;
static int ready = 0;
static PyObject *int_zero, *int_one;

static PyObject *s_stream, *s_emitted_hook, *s_watched, *s_input, *s_emitted, *s_switch, *s_remember, *s_send_batch, *s_ack_trees,
    *s_routes, *s_batches, *s_outbox, *s_batch_size, *s_metrics, *s_task_id;

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
    PyObject *tt, *st, *bt, *rt, *mt;
    Py_buffer seed;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!y*", &PyType_Type, &tt, &PyType_Type, &st, &PyType_Type, &bt,
                          &PyType_Type, &rt, &PyType_Type, &mt, &seed))
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
    Py_ssize_t *const offsets[] = {&off_t_values, &off_t_source, &off_t_tree, &off_t_val, &off_s_fields,
                                   &off_r_stream, &off_r_emit_arity, &off_r_single, &off_r_subscribed, &off_r_key,
                                   &off_r_known, &off_r_choose, &off_b_values, &off_b_trees, &off_b_stream,
                                   &off_m_acks};
    enum { N_OFFSETS = sizeof(offsets) / sizeof(offsets[0]) };
    Py_ssize_t before[N_OFFSETS];
    for (int i = 0; i < N_OFFSETS; i++) before[i] = *offsets[i];
    PyTypeObject *tuple_t = (PyTypeObject *)tt, *source_t = (PyTypeObject *)st, *batch_t = (PyTypeObject *)bt,
                 *route_t = (PyTypeObject *)rt, *mail_t = (PyTypeObject *)mt;
    if (member_offset(tuple_t, "values", &off_t_values) || member_offset(tuple_t, "_source", &off_t_source) ||
        member_offset(tuple_t, "_tree", &off_t_tree) || member_offset(tuple_t, "_val", &off_t_val) ||
        member_offset(source_t, "fields", &off_s_fields) || member_offset(route_t, "stream", &off_r_stream) ||
        member_offset(route_t, "emit_arity", &off_r_emit_arity) || member_offset(route_t, "single", &off_r_single) ||
        member_offset(route_t, "subscribed", &off_r_subscribed) || member_offset(route_t, "key", &off_r_key) ||
        member_offset(route_t, "known", &off_r_known) || member_offset(route_t, "choose", &off_r_choose) ||
        member_offset(batch_t, "values", &off_b_values) || member_offset(batch_t, "trees", &off_b_trees) ||
        member_offset(batch_t, "stream", &off_b_stream) || member_offset(mail_t, "acks", &off_m_acks)) {
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
    ready = 1;
    Py_RETURN_NONE;
}

/* -- helpers ----------------------------------------------------------------------------- */
static inline void slot_set(PyObject *obj, Py_ssize_t off, PyObject *value) { /* steals value */
    PyObject *old = SLOT(obj, off);
    SLOT(obj, off) = value;
    Py_XDECREF(old);
}

/* metrics.emitted += 1, in the metrics' instance dict (``metrics`` is that dict) */
static int count_emitted(PyObject *metrics) {
    PyObject *n = PyDict_GetItemWithError(metrics, s_emitted); /* borrowed */
    if (n == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_AttributeError, s_emitted);
        return -1;
    }
    PyObject *m = PyNumber_Add(n, int_one);
    if (m == NULL) return -1;
    int r = PyDict_SetItem(metrics, s_emitted, m);
    Py_DECREF(m);
    return r;
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

/* acks = mails[root % len(mails)].acks; acks[root] = acks.get(root, 0) ^ val */
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

/* -- EmitKernel -------------------------------------------------------------------------- */
typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyObject *executor, *collector, *fallback, *default_stream;
    PyObject *routes, *batches, *outbox, *metrics, *task_id;
    PyObject *executor_dict, *collector_dict; /* their instance dicts; metrics is the metrics' dict */
    Py_ssize_t batch_size;
} EmitKernel;

static unsigned long long n_fast, n_fallback, n_inline; /* what ran where (counters()) */

/* if executor._watched: executor._emitted(stream, values, targets) -- the observer and the
   debug log, as the Python path calls them (after counting, before sending). */
static int watched_emit(EmitKernel *k, PyObject *stream, PyObject *values, PyObject *targets) {
    PyObject *w = dict_attr(k->executor_dict, s_watched);
    if (w == NULL) return -1;
    int watched = PyObject_IsTrue(w);
    Py_DECREF(w);
    if (watched <= 0) return watched;
    PyObject *r = PyObject_CallMethodObjArgs(k->executor, s_emitted_hook, stream, values, targets, NULL);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

static int kernel_traverse(EmitKernel *k, visitproc visit, void *arg) {
    Py_VISIT(k->executor);
    Py_VISIT(k->collector);
    Py_VISIT(k->fallback);
    Py_VISIT(k->default_stream);
    Py_VISIT(k->routes);
    Py_VISIT(k->batches);
    Py_VISIT(k->outbox);
    Py_VISIT(k->metrics);
    Py_VISIT(k->task_id);
    Py_VISIT(k->executor_dict);
    Py_VISIT(k->collector_dict);
    return 0;
}

static int kernel_clear(EmitKernel *k) {
    Py_CLEAR(k->executor);
    Py_CLEAR(k->collector);
    Py_CLEAR(k->fallback);
    Py_CLEAR(k->default_stream);
    Py_CLEAR(k->routes);
    Py_CLEAR(k->batches);
    Py_CLEAR(k->outbox);
    Py_CLEAR(k->metrics);
    Py_CLEAR(k->task_id);
    Py_CLEAR(k->executor_dict);
    Py_CLEAR(k->collector_dict);
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
    PyObject *route = PyDict_GetItemWithError(k->routes, stream); /* borrowed */
    if (route == NULL) {
        if (PyErr_Occurred()) return NULL;
        goto fallback;
    }
    if (Py_TYPE(route) != RouteType) goto fallback;
    PyObject *arity_o = SLOT(route, off_r_emit_arity);
    if (arity_o == NULL || !PyLong_CheckExact(arity_o)) goto fallback;
    Py_ssize_t n = PyList_GET_SIZE(values);
    Py_ssize_t arity = PyLong_AsSsize_t(arity_o);
    if (arity == -1 && PyErr_Occurred()) return NULL;
    if (arity != n) goto fallback; /* also a direct stream: arity -1 */
    PyObject *subscribed = SLOT(route, off_r_subscribed);
    if (subscribed == Py_False) { /* nobody reads the stream: nothing to send, no tree to join */
        n_fast++;
        if (count_emitted(k->metrics) < 0) return NULL;
        result = PyList_New(0);
        if (result == NULL || watched_emit(k, stream, values, result) < 0) {
            Py_XDECREF(result);
            return NULL;
        }
        return result;
    }
    if (subscribed != Py_True) goto fallback;
    tup = dict_attr(k->collector_dict, s_input);
    if (tup == NULL) return NULL;
    if (Py_TYPE(tup) != TupleType) goto fallback; /* None, or a subclass: the general path */
    PyObject *tree_o = SLOT(tup, off_t_tree); /* borrowed: root_o owns a reference from here */
    if (tree_o == NULL || !PyLong_CheckExact(tree_o)) goto fallback; /* several trees, or acked */
    root_o = Py_NewRef(tree_o);
    PyObject *val_o = SLOT(tup, off_t_val);
    if (val_o == NULL || !PyLong_CheckExact(val_o)) goto fallback;
    uint64_t root = PyLong_AsUnsignedLong(root_o);
    if (root == (uint64_t)-1 && PyErr_Occurred()) goto error;

    /* Targets, as emit: a str key is looked up in route.known first. */
    PyObject *key_o = SLOT(route, off_r_key);
    PyObject *choose = SLOT(route, off_r_choose);
    if (key_o == NULL || choose == NULL) goto fallback;
    Py_ssize_t key = PyLong_AsSsize_t(key_o);
    if (key == -1 && PyErr_Occurred()) goto error;
    PyObject *choose_args[2] = {k->task_id, values};
    if (key >= 0 && key < n && PyUnicode_CheckExact(PyList_GET_ITEM(values, key))) {
        PyObject *kv = PyList_GET_ITEM(values, key);
        PyObject *known = SLOT(route, off_r_known);
        PyObject *hit = NULL;
        if (known != NULL && PyDict_CheckExact(known)) {
            hit = PyDict_GetItemWithError(known, kv);
            if (hit == NULL && PyErr_Occurred()) goto error;
        }
        int truth = hit == NULL ? 0 : PyObject_IsTrue(hit);
        if (truth < 0) goto error;
        if (truth) {
            targets = Py_NewRef(hit);
        } else {
            Py_INCREF(kv); /* choose may drop values' last reference to it */
            PyObject *chosen = PyObject_Vectorcall(choose, choose_args, 2, NULL);
            if (chosen == NULL) {
                Py_DECREF(kv);
                goto error;
            }
            targets = PyObject_CallMethodObjArgs(route, s_remember, kv, chosen, NULL);
            Py_DECREF(kv);
            Py_DECREF(chosen);
            if (targets == NULL) goto error;
        }
    } else {
        targets = PyObject_Vectorcall(choose, choose_args, 2, NULL);
        if (targets == NULL) goto error;
    }
    n_fast++;
    if (count_emitted(k->metrics) < 0) goto error;
    if (watched_emit(k, stream, values, targets) < 0) goto error;
    if (!PyList_CheckExact(targets)) {
        PyErr_SetString(PyExc_TypeError, "a grouping chose targets that are not a list");
        goto error;
    }
    Py_ssize_t nt = PyList_GET_SIZE(targets);
    if (nt == 0) {
        result = PyList_New(0);
        goto done;
    }
    PyObject *rstream = SLOT(route, off_r_stream);
    if (rstream == NULL) goto error_attr;
    PyObject *item = SLOT(route, off_r_single) == Py_True ? PyList_GET_ITEM(values, 0) : values;
    Py_INCREF(item);
    result = PyList_GetSlice(targets, 0, nt); /* targets.copy(), taken before any send */
    if (result == NULL) {
        Py_DECREF(item);
        goto error;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(result); i++) {
        PyObject *task = PyList_GET_ITEM(result, i);
        PyObject *batch = PyDict_GetItemWithError(k->batches, task); /* borrowed */
        if (batch == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, task);
            Py_DECREF(item);
            goto error;
        }
        if (Py_TYPE(batch) != BatchType) {
            Py_DECREF(item);
            PyErr_SetString(PyExc_TypeError, "a batch of an unexpected type");
            goto error;
        }
        if (SLOT(batch, off_b_stream) != rstream) {
            PyObject *r = PyObject_CallMethodOneArg(batch, s_switch, rstream);
            if (r == NULL) {
                Py_DECREF(item);
                goto error;
            }
            Py_DECREF(r);
        }
        PyObject *trees = SLOT(batch, off_b_trees), *bvalues = SLOT(batch, off_b_values);
        if (trees == NULL || bvalues == NULL || !PyList_CheckExact(trees) || !PyList_CheckExact(bvalues)) {
            Py_DECREF(item);
            goto error_attr;
        }
        if (root) {
            uint64_t edge = next_edge();
            uint64_t v = PyLong_AsUnsignedLong(SLOT(tup, off_t_val));
            PyObject *nv = (v == (uint64_t)-1 && PyErr_Occurred()) ? NULL : PyLong_FromUnsignedLong(v ^ edge);
            PyObject *edge_o = nv ? PyLong_FromUnsignedLong(edge) : NULL;
            if (edge_o == NULL) {
                Py_XDECREF(nv);
                Py_DECREF(item);
                goto error;
            }
            slot_set(tup, off_t_val, nv);
            int r = PyList_Append(trees, root_o) | PyList_Append(trees, edge_o);
            Py_DECREF(edge_o);
            if (r) {
                Py_DECREF(item);
                goto error;
            }
        } else {
            PyObject *zero = int_zero;
            if (PyList_Append(trees, zero) | PyList_Append(trees, zero)) {
                Py_DECREF(item);
                goto error;
            }
        }
        if (PyList_Append(bvalues, item)) {
            Py_DECREF(item);
            goto error;
        }
        if (PyList_GET_SIZE(bvalues) >= k->batch_size) {
            PyObject *r = PyObject_CallMethodOneArg(k->outbox, s_send_batch, task);
            if (r == NULL) {
                Py_DECREF(item);
                goto error;
            }
            Py_DECREF(r);
        }
    }
    Py_DECREF(item);
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
    k->routes = PyObject_GetAttr(executor, s_routes);
    k->batches = PyObject_GetAttr(executor, s_batches);
    k->outbox = PyObject_GetAttr(executor, s_outbox);
    PyObject *metrics = PyObject_GetAttr(executor, s_metrics);
    k->metrics = metrics ? PyObject_GenericGetDict(metrics, NULL) : NULL;
    Py_XDECREF(metrics);
    k->executor_dict = PyObject_GenericGetDict(executor, NULL);
    k->collector_dict = PyObject_GenericGetDict(collector, NULL);
    k->task_id = PyObject_GetAttr(executor, s_task_id);
    if (!k->routes || !k->batches || !k->outbox || !k->metrics || !k->task_id || !k->executor_dict ||
        !k->collector_dict)
        goto error;
    if (!PyDict_CheckExact(k->routes) || !PyDict_CheckExact(k->batches) || !PyDict_CheckExact(k->metrics) ||
        !PyDict_CheckExact(k->executor_dict) || !PyDict_CheckExact(k->collector_dict)) {
        PyErr_SetString(PyExc_TypeError, "routes, _batches and the instance dicts must be dicts");
        goto error;
    }
    PyObject *size = PyObject_GetAttr(k->outbox, s_batch_size);
    if (size == NULL) goto error;
    k->batch_size = PyLong_AsSsize_t(size);
    Py_DECREF(size);
    if (k->batch_size == -1 && PyErr_Occurred()) goto error;
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
    PyObject *cdict = PyObject_GenericGetDict(collector, NULL); /* collector.input lives there */
    if (cdict == NULL) return NULL;
    PyObject *tup = NULL, *root_o = NULL, *val_o = NULL, *values = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(column); i++) {
        PyObject *item = PyList_GET_ITEM(column, i);
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
        if (single) {
            values = PyList_New(1);
            if (values == NULL) goto error;
            PyList_SET_ITEM(values, 0, Py_NewRef(item));
        } else {
            values = Py_NewRef(item);
        }
        uint64_t root = PyLong_AsUnsignedLong(root_o);
        if (root == (uint64_t)-1 && PyErr_Occurred()) goto error;
        int val_true = PyObject_IsTrue(val_o);
        if (val_true < 0) goto error;
        if (root || !val_true) { /* Tuple(values, source, root, val), slots written directly */
            tup = TupleType->tp_alloc(TupleType, 0);
            if (tup == NULL) goto error;
            SLOT(tup, off_t_values) = values; /* stolen */
            values = NULL;
            SLOT(tup, off_t_source) = Py_NewRef(source);
            SLOT(tup, off_t_tree) = Py_NewRef(root_o);
            SLOT(tup, off_t_val) = Py_NewRef(val_o);
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
        if (PyDict_SetItem(cdict, s_input, tup) < 0) goto error;
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
        Py_CLEAR(tup);
        Py_CLEAR(root_o);
        Py_CLEAR(val_o);
    }
    if (last_root && fold_ack(mails, last_root, last_val) < 0) goto error;
    if (PyDict_SetItem(cdict, s_input, Py_None) < 0) goto error;
    Py_DECREF(cdict);
    return PyLong_FromSsize_t(failed);
error:
    Py_DECREF(cdict);
    Py_XDECREF(tup);
    Py_XDECREF(root_o);
    Py_XDECREF(val_o);
    Py_XDECREF(values);
    return NULL;
}

static PyObject *counters(PyObject *mod, PyObject *unused) {
    return Py_BuildValue("{sKsKsK}", "emit_fast", n_fast, "emit_fallback", n_fallback, "run_inline", n_inline);
}

/* -- module ------------------------------------------------------------------------------ */
static PyMethodDef methods[] = {
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
    if ((int_zero = PyLong_FromLong(0)) == NULL || (int_one = PyLong_FromLong(1)) == NULL) return NULL;
    INTERN(s_watched, "_watched");
    INTERN(s_emitted_hook, "_emitted");
    INTERN(s_stream, "stream");
    INTERN(s_input, "input");
    INTERN(s_emitted, "emitted");
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
    if (PyType_Ready(&EmitKernelType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&EmitKernelType);
    if (PyModule_AddObject(m, "EmitKernel", (PyObject *)&EmitKernelType) < 0) {
        Py_DECREF(&EmitKernelType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
