/*
 * budget.c - consumers of a device and their share of its budget (the Budget paragraph of
 * DESIGN in device/device.h).
 *
 * DESIGN
 * A consumer's use beyond its reservation is what it borrows; the device keeps the sum of
 * those (borrowed) next to the sum of reservations, so a charge is decided in O(1): it may
 * raise the consumer's borrowing only while the device's borrowing stays within the
 * unreserved rest (budget - reserved). Use within the reservation is never refused, and a
 * new reservation may only take what is neither reserved nor lent now, so no borrower ever
 * sits on memory another consumer reserved.
 */
#include <assert.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "device/device-impl.h"

static_assert(offsetof(struct rtx_device_consumer, account) == 0,
              "the account slots cast their account to its consumer");

const char *rtx__device_bytes_str(size_t bytes, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%zu B", bytes);
    else if (v == (double)(uint64_t)v)
        snprintf(buf, len, "%.0f %s", v, units[u]);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

static size_t over(size_t used, size_t reserved) { return used > reserved ? used - reserved : 0; }

/* Bytes the device's unreserved rest has not lent (under mu). */
static size_t lendable(const struct rtx_device *d) {
    size_t rest = d->budget > d->reserved ? d->budget - d->reserved : 0;
    return rest > d->borrowed ? rest - d->borrowed : 0;
}

/* The budget rule (see DESIGN), under d->mu. */
static int charge_locked(struct rtx_device_consumer *c, size_t bytes, struct rtx_err *err) {
    struct rtx_device *d = c->d;
    size_t before = over(c->used, c->reserved);
    size_t want = c->used + bytes;
    if (want < c->used) want = SIZE_MAX; /* overflow: refused below */
    size_t extra = over(want, c->reserved) - before;
    if (extra > lendable(d) || want == SIZE_MAX) {
        c->refusals++;
        d->refusals++;
        char u[32], r[32], f[32], rest[32];
        size_t unreserved = d->budget > d->reserved ? d->budget - d->reserved : 0;
        return rtx_err_set(err, RTX_ENOMEM,
                           "%s: consumer '%.60s' would use %s, reserved %s, and only %s of "
                           "the unreserved %s is free to borrow",
                           d->name, c->name, rtx__device_bytes_str(want, u, sizeof u),
                           rtx__device_bytes_str(c->reserved, r, sizeof r),
                           rtx__device_bytes_str(lendable(d), f, sizeof f),
                           rtx__device_bytes_str(unreserved, rest, sizeof rest));
    }
    c->used = want;
    if (c->used > c->peak) c->peak = c->used;
    d->used += bytes;
    d->borrowed += extra;
    return 0;
}

static void credit_locked(struct rtx_device_consumer *c, size_t bytes) {
    struct rtx_device *d = c->d;
    if (bytes > c->used) bytes = c->used; /* more than charged: a caller's bug, not ours */
    size_t before = over(c->used, c->reserved);
    c->used -= bytes;
    d->used -= bytes;
    d->borrowed -= before - over(c->used, c->reserved);
}

static int account_charge(struct rtx_mem_account *a, size_t bytes, struct rtx_err *err) {
    struct rtx_device_consumer *c = (struct rtx_device_consumer *)a; /* account is first */
    pthread_mutex_lock(&c->d->mu);
    int rc = charge_locked(c, bytes, err);
    pthread_mutex_unlock(&c->d->mu);
    return rc;
}

static void account_credit(struct rtx_mem_account *a, size_t bytes) {
    struct rtx_device_consumer *c = (struct rtx_device_consumer *)a;
    pthread_mutex_lock(&c->d->mu);
    credit_locked(c, bytes);
    pthread_mutex_unlock(&c->d->mu);
}

void rtx__device_consumer_account_init(struct rtx_device_consumer *c) {
    c->account.charge = account_charge;
    c->account.credit = account_credit;
}

/* ------------------------------------------------------------------------------------------
 * Consumers
 * ---------------------------------------------------------------------------------------- */

int rtx_device_consumer_new(struct rtx_device *d, const char *name, size_t reserve_bytes,
                            struct rtx_device_consumer **out, struct rtx_err *err) {
    if (!d || !name || !out)
        return rtx_err_set(err, RTX_EINVAL, "device consumer: device, name or out is NULL");
    *out = NULL;
    struct rtx_device_consumer *c = rtx_calloc(1, sizeof *c);
    if (!c) return rtx_err_set(err, RTX_ENOMEM, "%s: out of memory for a consumer", d->name);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->d = d;
    c->reserved = reserve_bytes;
    rtx__device_consumer_account_init(c);
    int rc = 0;
    pthread_mutex_lock(&d->mu);
    size_t left = lendable(d);
    if (!d->healthy) {
        rc = rtx_err_set(err, RTX_EUNAVAILABLE, "%s is unhealthy: %s", d->name, d->detail);
    } else if (reserve_bytes > left) {
        char a[32], l[32], b[32], r[32], o[32];
        rc = rtx_err_set(err, RTX_ELIMIT,
                         "%s: consumer '%.60s' asks to reserve %s, but only %s of the %s "
                         "budget is left (%s reserved, %s lent beyond reservations)",
                         d->name, name, rtx__device_bytes_str(reserve_bytes, a, sizeof a),
                         rtx__device_bytes_str(left, l, sizeof l),
                         rtx__device_bytes_str(d->budget, b, sizeof b),
                         rtx__device_bytes_str(d->reserved, r, sizeof r),
                         rtx__device_bytes_str(d->borrowed, o, sizeof o));
    } else {
        d->reserved += reserve_bytes;
        if (d->consumers_tail)
            d->consumers_tail->next = c;
        else
            d->consumers = c;
        d->consumers_tail = c;
        d->n_consumers++;
    }
    pthread_mutex_unlock(&d->mu);
    if (rc) {
        rtx_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void rtx_device_consumer_free(struct rtx_device_consumer *c) {
    if (!c) return;
    struct rtx_device *d = c->d;
    pthread_mutex_lock(&d->mu);
    credit_locked(c, c->used); /* zero by contract; a leak must not shrink the budget */
    d->reserved -= c->reserved;
    struct rtx_device_consumer **pp = &d->consumers, *prev = NULL;
    while (*pp && *pp != c) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = c->next;
        if (d->consumers_tail == c) d->consumers_tail = prev;
        d->n_consumers--;
    }
    pthread_mutex_unlock(&d->mu);
    rtx_free(c);
}

struct rtx_device *rtx_device_consumer_device(struct rtx_device_consumer *c) { return c->d; }

struct rtx_mem_account *rtx_device_consumer_account(struct rtx_device_consumer *c) {
    return &c->account;
}

int rtx_device_consumer_charge(struct rtx_device_consumer *c, size_t bytes, struct rtx_err *err) {
    return account_charge(&c->account, bytes, err);
}

void rtx_device_consumer_credit(struct rtx_device_consumer *c, size_t bytes) {
    account_credit(&c->account, bytes);
}
