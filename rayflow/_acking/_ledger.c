/* rayflow._acking._ledger_kernel: the acker's ledger (rayflow/_acking/ledger.py, AckLedger) as a
 * C type, against the CPython C API (3.10 and later, not the limited API, not free-threaded).
 * Optional: setup.py builds it where it builds rayflow._speedups, and
 * rayflow/_acking/ledger_build.py loads it unless RAYFLOW_PURE_PYTHON=1 is set or the import
 * fails; otherwise the Python ledger runs. The Python is the contract: every method here must
 * answer what it answers, message for message (tests/test_ack_ledger.py runs on both, and
 * compares them on random message sequences).
 *
 *   AckLedger(buckets=3, young=16384)
 *       The same constructor; ``young`` is accepted and ignored (below).
 *   init / ack / fail / reset_timeout / apply / rotate / len() / capacity
 *       As in ledger.py. ``apply`` reads ``inits`` and ``acks`` straight from their buffers
 *       when they are arrays of 64-bit unsigned ids (what AckerMail.take sends), from any
 *       sequence of ints otherwise. ``rotate`` returns the forgotten roots in table order.
 *   setup(Outcome)
 *       Once, at import: the class of the one-message answers (ledger.Outcome).
 *
 * Where trees live. Every tree is one slot of one open-addressing table (linear probing, at most
 * half full, backward-shift deletion, root 0 reserved as the empty mark) spread over four arrays
 * -- root, checksum, owner word, expiry stamp -- exactly the Python ledger's table: 21 bytes a
 * slot, 42 to 84 bytes a tree. The Python ledger keeps its newest trees in a dict first because a
 * dict lookup runs at C speed and its own probing does not; here probing is C, so there is no
 * young dict and no moving of trees: a touch stamps the slot with the current rotation, which is
 * what the Python's move at rotation time does for a young tree. The arrays come from PyMem (so
 * tracemalloc counts them, as it counts the Python ledger's).
 *
 * The owner word is the spout task shifted left by one, the low bit set once the tree failed (0:
 * no init yet). Stamps count rotations modulo 255; 255 marks an empty slot. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MIN_CAPACITY 1024
#define FREE_STAMP 255
#define FAILED 1u

static PyObject *OutcomeType; /* ledger.Outcome, from setup() */

typedef struct {
    PyObject_HEAD
    uint64_t *roots;
    uint64_t *vals;
    uint32_t *owners;
    uint8_t *stamps;
    size_t mask;
    Py_ssize_t count;
    long long buckets;
    uint8_t stamp;
} Ledger;

/* -- the table ---------------------------------------------------------------------------- */

static int allocate(Ledger *self, size_t capacity) {
    uint64_t *roots = PyMem_Calloc(capacity, sizeof(uint64_t));
    uint64_t *vals = PyMem_Calloc(capacity, sizeof(uint64_t));
    uint32_t *owners = PyMem_Calloc(capacity, sizeof(uint32_t));
    uint8_t *stamps = PyMem_Malloc(capacity);
    if (!roots || !vals || !owners || !stamps) {
        PyMem_Free(roots);
        PyMem_Free(vals);
        PyMem_Free(owners);
        PyMem_Free(stamps);
        PyErr_NoMemory();
        return -1;
    }
    memset(stamps, FREE_STAMP, capacity);
    self->roots = roots;
    self->vals = vals;
    self->owners = owners;
    self->stamps = stamps;
    self->mask = capacity - 1;
    self->count = 0;
    return 0;
}

static void release(Ledger *self) {
    PyMem_Free(self->roots);
    PyMem_Free(self->vals);
    PyMem_Free(self->owners);
    PyMem_Free(self->stamps);
    self->roots = self->vals = NULL;
    self->owners = NULL;
    self->stamps = NULL;
}

/* Rehash every tree into a table of ``capacity`` slots; the old one is kept on failure. */
static int resize(Ledger *self, size_t capacity) {
    Ledger old = *self;
    if (allocate(self, capacity) < 0) {
        *self = old;
        return -1;
    }
    size_t mask = self->mask;
    Py_ssize_t count = 0;
    for (size_t j = 0; j <= old.mask; j++) {
        uint64_t r = old.roots[j];
        if (!r) continue;
        size_t i = (size_t)r & mask;
        while (self->roots[i]) i = (i + 1) & mask;
        self->roots[i] = r;
        self->vals[i] = old.vals[j];
        self->owners[i] = old.owners[j];
        self->stamps[i] = old.stamps[j];
        count++;
    }
    self->count = count;
    release(&old);
    return 0;
}

/* The slot of ``root``, or -1. */
static inline Py_ssize_t find(const Ledger *self, uint64_t root) {
    const uint64_t *roots = self->roots;
    size_t mask = self->mask, i = (size_t)root & mask;
    uint64_t r;
    while ((r = roots[i]) != root) {
        if (!r) return -1;
        i = (i + 1) & mask;
    }
    return (Py_ssize_t)i;
}

/* The slot of ``root``'s tree, stamped now: a new, empty tree if it had none (growing the
 * table when more than half full); -1 with an exception set if it cannot grow. */
static inline Py_ssize_t touch(Ledger *self, uint64_t root) {
    uint64_t *roots = self->roots;
    size_t mask = self->mask, i = (size_t)root & mask;
    uint64_t r;
    while ((r = roots[i]) != root) {
        if (!r) {
            roots[i] = root;
            self->vals[i] = 0;
            self->owners[i] = 0;
            if ((size_t)++self->count * 2 > mask) {
                if (resize(self, 2 * (mask + 1)) < 0) {
                    roots[i] = 0;
                    self->count--;
                    return -1;
                }
                i = (size_t)find(self, root);
            }
            break;
        }
        i = (i + 1) & mask;
    }
    self->stamps[i] = self->stamp;
    return (Py_ssize_t)i;
}

/* Empty slot ``i``, shifting back the entries after it that probed past it (no tombstones). */
static void remove_slot(Ledger *self, size_t i) {
    uint64_t *roots = self->roots;
    size_t mask = self->mask, j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint64_t r = roots[j];
        if (!r) break;
        size_t home = (size_t)r & mask;
        /* The entry at j may fill the hole at i unless its home lies cyclically in (i, j]. */
        if (i < j ? (home <= i || home > j) : (home <= i && home > j)) {
            roots[i] = r;
            self->vals[i] = self->vals[j];
            self->owners[i] = self->owners[j];
            self->stamps[i] = self->stamps[j];
            i = j;
        }
    }
    roots[i] = 0;
    self->vals[i] = 0;
    self->owners[i] = 0;
    self->stamps[i] = FREE_STAMP;
    self->count--;
}

/* The owner word of the tree in slot ``i`` if it settles now (init in, and failed or checksum
 * zero), the slot then emptied; 0 if it stays pending. */
static inline uint32_t settle(Ledger *self, size_t i) {
    uint32_t owner = self->owners[i];
    if (owner < 2 || (self->vals[i] && !(owner & FAILED))) return 0;
    remove_slot(self, i);
    return owner;
}

/* -- conversions -------------------------------------------------------------------------- */

static int as_root(PyObject *obj, uint64_t *out) {
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    if (!v) {
        PyErr_SetString(PyExc_ValueError, "root id 0 is reserved (anchoring.new_id never makes it)");
        return -1;
    }
    *out = v;
    return 0;
}

static int as_spout_task(PyObject *obj, uint32_t *word) {
    long long task = PyLong_AsLongLong(obj);
    if (task == -1 && PyErr_Occurred()) return -1;
    if (task < 0 || task >= (1LL << 31)) {
        PyErr_Format(PyExc_OverflowError, "spout task %lld out of range: a task id is in [0, 2**31)", task);
        return -1;
    }
    *word = (uint32_t)task << 1;
    return 0;
}

/* 64-bit ids, read from an array's buffer or converted from a sequence of ints. */
typedef struct {
    Py_buffer view;
    int has_view;
    PyObject *fast; /* PySequence_Fast of a sequence without a suitable buffer */
    const uint64_t *ids;
    Py_ssize_t n;
} Ids;

static int ids_open(PyObject *obj, Ids *ids) {
    ids->has_view = 0;
    ids->fast = NULL;
    ids->ids = NULL;
    if (PyObject_CheckBuffer(obj) && !PyBytes_Check(obj) && !PyByteArray_Check(obj)) {
        if (PyObject_GetBuffer(obj, &ids->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear(); /* not contiguous: read it as a sequence */
            goto sequence;
        }
        const char *f = ids->view.format;
        if (ids->view.itemsize == 8 && f && (!strcmp(f, "L") || !strcmp(f, "Q"))) {
            ids->has_view = 1;
            ids->ids = ids->view.buf;
            ids->n = ids->view.len / 8;
            return 0;
        }
        PyBuffer_Release(&ids->view);
    }
sequence:
    ids->fast = PySequence_Fast(obj, "inits and acks must be sequences of ints");
    if (!ids->fast) return -1;
    ids->n = PySequence_Fast_GET_SIZE(ids->fast);
    return 0;
}

static void ids_close(Ids *ids) {
    if (ids->has_view) PyBuffer_Release(&ids->view);
    Py_XDECREF(ids->fast);
}

/* The pair at ``k`` (root at 2k, value at 2k+1). */
static inline int ids_pair(const Ids *ids, Py_ssize_t k, uint64_t *root, uint64_t *val) {
    if (ids->ids) {
        *root = ids->ids[2 * k];
        *val = ids->ids[2 * k + 1];
        if (!*root) {
            PyErr_SetString(PyExc_ValueError, "root id 0 is reserved (anchoring.new_id never makes it)");
            return -1;
        }
        return 0;
    }
    /* Re-read each time: a finalizer run by a collection while this payload is applied could
       resize the list (the array's buffer is pinned while viewed; a list is not). */
    if (2 * k + 1 >= PySequence_Fast_GET_SIZE(ids->fast)) {
        PyErr_SetString(PyExc_RuntimeError, "an acker payload's list changed while it was applied");
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(ids->fast);
    if (as_root(items[2 * k], root) < 0) return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(items[2 * k + 1]);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    *val = v;
    return 0;
}

/* -- what settled ------------------------------------------------------------------------- */

/* spout task -> ([acked roots], [failed roots]), with the last task's lists at hand. */
typedef struct {
    PyObject *dict;
    uint32_t task; /* the owner word's task of ``lists``; lists[0] NULL: none yet */
    PyObject *lists[2];
} Settled;

static int record(Settled *s, uint32_t owner, uint64_t root) {
    uint32_t task = owner >> 1;
    if (!s->lists[0] || task != s->task) {
        PyObject *key = PyLong_FromUnsignedLong(task);
        if (!key) return -1;
        PyObject *pair = PyDict_GetItemWithError(s->dict, key);
        if (!pair) {
            if (PyErr_Occurred()) {
                Py_DECREF(key);
                return -1;
            }
            pair = Py_BuildValue("([][])");
            if (!pair || PyDict_SetItem(s->dict, key, pair) < 0) {
                Py_XDECREF(pair);
                Py_DECREF(key);
                return -1;
            }
            Py_DECREF(pair); /* the dict holds it */
        }
        Py_DECREF(key);
        s->task = task;
        s->lists[0] = PyTuple_GET_ITEM(pair, 0);
        s->lists[1] = PyTuple_GET_ITEM(pair, 1);
    }
    PyObject *r = PyLong_FromUnsignedLongLong(root);
    if (!r) return -1;
    int failed = PyList_Append(s->lists[owner & FAILED], r);
    Py_DECREF(r);
    return failed;
}

static PyObject *outcome(uint32_t owner, uint64_t root) {
    if (!owner) Py_RETURN_NONE;
    if (!OutcomeType) {
        PyErr_SetString(PyExc_RuntimeError, "rayflow._acking._ledger_kernel.setup(Outcome) was not called");
        return NULL;
    }
    return PyObject_CallFunction(OutcomeType, "kKO", (unsigned long)(owner >> 1), (unsigned long long)root,
                                 (owner & FAILED) ? Py_False : Py_True);
}

/* -- the type ----------------------------------------------------------------------------- */

static PyObject *ledger_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"buckets", "young", NULL};
    long long buckets = 3;
    Py_ssize_t young = 16384;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|Ln:AckLedger", keywords, &buckets, &young)) return NULL;
    if (buckets < 2) {
        PyErr_SetString(PyExc_ValueError, "an AckLedger needs at least 2 buckets");
        return NULL;
    }
    Ledger *self = (Ledger *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->buckets = buckets;
    self->stamp = 0;
    if (allocate(self, MIN_CAPACITY) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void ledger_dealloc(Ledger *self) {
    release(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t ledger_len(Ledger *self) { return self->count; }

static PyObject *ledger_init(Ledger *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t root;
    uint32_t word;
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "init(root, val, spout_task) takes 3 arguments");
    if (as_root(args[0], &root) < 0) return NULL;
    unsigned long long val = PyLong_AsUnsignedLongLong(args[1]);
    if (val == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (as_spout_task(args[2], &word) < 0) return NULL;
    Py_ssize_t i = touch(self, root);
    if (i < 0) return NULL;
    self->vals[i] ^= val;
    self->owners[i] = word | (self->owners[i] & FAILED);
    return outcome(settle(self, (size_t)i), root);
}

static PyObject *ledger_ack(Ledger *self, PyObject *const *args, Py_ssize_t nargs) {
    uint64_t root;
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "ack(root, val) takes 2 arguments");
    if (as_root(args[0], &root) < 0) return NULL;
    unsigned long long val = PyLong_AsUnsignedLongLong(args[1]);
    if (val == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    Py_ssize_t i = touch(self, root);
    if (i < 0) return NULL;
    self->vals[i] ^= val;
    return outcome(settle(self, (size_t)i), root);
}

static PyObject *ledger_fail(Ledger *self, PyObject *arg) {
    uint64_t root;
    if (as_root(arg, &root) < 0) return NULL;
    Py_ssize_t i = touch(self, root);
    if (i < 0) return NULL;
    self->owners[i] |= FAILED;
    return outcome(settle(self, (size_t)i), root);
}

static PyObject *ledger_reset_timeout(Ledger *self, PyObject *arg) {
    uint64_t root;
    if (as_root(arg, &root) < 0) return NULL;
    Py_ssize_t i = touch(self, root);
    if (i < 0) return NULL;
    uint32_t task = self->owners[i] >> 1;
    if (!task) Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(task);
}

/* One acker payload: inits from ``spout_task``, then acks, then fails, in that order. */
static PyObject *ledger_apply(Ledger *self, PyObject *const *args, Py_ssize_t nargs) {
    uint32_t word;
    if (nargs != 4) return PyErr_Format(PyExc_TypeError, "apply(spout_task, inits, acks, fails) takes 4 arguments");
    if (as_spout_task(args[0], &word) < 0) return NULL;
    Settled s = {PyDict_New(), 0, {NULL, NULL}};
    if (!s.dict) return NULL;
    Ids ids;
    uint64_t root, val;
    if (ids_open(args[1], &ids) < 0) goto error;
    for (Py_ssize_t k = 0, n = ids.n / 2; k < n; k++) {
        if (ids_pair(&ids, k, &root, &val) < 0) goto error_ids;
        Py_ssize_t i = touch(self, root);
        if (i < 0) goto error_ids;
        self->vals[i] ^= val;
        self->owners[i] = word | (self->owners[i] & FAILED);
        uint32_t owner = settle(self, (size_t)i);
        if (owner && record(&s, owner, root) < 0) goto error_ids;
    }
    ids_close(&ids);
    if (ids_open(args[2], &ids) < 0) goto error;
    for (Py_ssize_t k = 0, n = ids.n / 2; k < n; k++) {
        if (ids_pair(&ids, k, &root, &val) < 0) goto error_ids;
        Py_ssize_t i = touch(self, root);
        if (i < 0) goto error_ids;
        self->vals[i] ^= val;
        uint32_t owner = settle(self, (size_t)i);
        if (owner && record(&s, owner, root) < 0) goto error_ids;
    }
    ids_close(&ids);
    PyObject *fails = PySequence_Fast(args[3], "fails must be a sequence of ints");
    if (!fails) goto error;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(fails); k++) {
        if (as_root(PySequence_Fast_GET_ITEM(fails, k), &root) < 0) goto error_fails;
        Py_ssize_t i = touch(self, root);
        if (i < 0) goto error_fails;
        self->owners[i] |= FAILED;
        uint32_t owner = settle(self, (size_t)i);
        if (owner && record(&s, owner, root) < 0) goto error_fails;
    }
    Py_DECREF(fails);
    return s.dict;
error_fails:
    Py_DECREF(fails);
    goto error;
error_ids:
    ids_close(&ids);
error:
    Py_DECREF(s.dict);
    return NULL;
}

/* Advance expiry by one cohort; the roots forgotten. */
static PyObject *ledger_rotate(Ledger *self, PyObject *unused) {
    self->stamp = (uint8_t)((self->stamp + 1) % FREE_STAMP);
    long long c = ((long long)self->stamp - self->buckets) % FREE_STAMP;
    uint8_t cohort = (uint8_t)(c < 0 ? c + FREE_STAMP : c);
    PyObject *expired = PyList_New(0);
    if (!expired) return NULL;
    Py_ssize_t n = 0;
    const uint8_t *stamps = self->stamps, *end = stamps + self->mask + 1, *at = stamps;
    while ((at = memchr(at, cohort, (size_t)(end - at))) != NULL) {
        PyObject *r = PyLong_FromUnsignedLongLong(self->roots[at++ - stamps]);
        if (!r || PyList_Append(expired, r) < 0) {
            Py_XDECREF(r);
            Py_DECREF(expired);
            return NULL;
        }
        Py_DECREF(r);
        n++;
    }
    /* Removing shifts entries back, so the cohort is collected first and removed root by root. */
    for (Py_ssize_t k = 0; k < n; k++) {
        uint64_t root = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(expired, k));
        remove_slot(self, (size_t)find(self, root));
    }
    if ((size_t)self->count * 8 < self->mask && self->mask >= MIN_CAPACITY) {
        size_t capacity = MIN_CAPACITY; /* a quarter full: room to grow twice before the next resize */
        while (capacity < 4 * (size_t)self->count) capacity *= 2;
        if (resize(self, capacity) < 0) PyErr_Clear(); /* keeping the bigger table is no error */
    }
    return expired;
}

static PyObject *ledger_capacity(Ledger *self, void *unused) { return PyLong_FromSize_t(self->mask + 1); }

static PyMethodDef ledger_methods[] = {
    {"init", (PyCFunction)(void (*)(void))ledger_init, METH_FASTCALL, "init(root, val, spout_task) -> Outcome | None"},
    {"ack", (PyCFunction)(void (*)(void))ledger_ack, METH_FASTCALL, "ack(root, val) -> Outcome | None"},
    {"fail", (PyCFunction)ledger_fail, METH_O, "fail(root) -> Outcome | None"},
    {"reset_timeout", (PyCFunction)ledger_reset_timeout, METH_O, "reset_timeout(root) -> spout task | None"},
    {"apply", (PyCFunction)(void (*)(void))ledger_apply, METH_FASTCALL,
     "apply(spout_task, inits, acks, fails) -> {spout task: (acked, failed)}"},
    {"rotate", (PyCFunction)ledger_rotate, METH_NOARGS, "rotate() -> roots forgotten"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ledger_getset[] = {
    {"capacity", (getter)ledger_capacity, NULL, "Slots in the table (a power of two).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods ledger_as_sequence = {.sq_length = (lenfunc)ledger_len};

static PyTypeObject LedgerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rayflow._acking._ledger_kernel.AckLedger",
    .tp_basicsize = sizeof(Ledger),
    .tp_dealloc = (destructor)ledger_dealloc,
    .tp_as_sequence = &ledger_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The acker's ledger in C: rayflow._acking.ledger.AckLedger's contract (see _ledger.c).",
    .tp_methods = ledger_methods,
    .tp_getset = ledger_getset,
    .tp_new = ledger_new,
};

/* -- module ------------------------------------------------------------------------------- */

static PyObject *setup(PyObject *mod, PyObject *outcome_type) {
    Py_INCREF(outcome_type);
    Py_XSETREF(OutcomeType, outcome_type);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_O, "setup(Outcome): the class of the one-message answers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "rayflow._acking._ledger_kernel", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ledger_kernel(void) {
    if (PyType_Ready(&LedgerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    Py_INCREF(&LedgerType);
    if (PyModule_AddObject(m, "AckLedger", (PyObject *)&LedgerType) < 0) {
        Py_DECREF(&LedgerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
