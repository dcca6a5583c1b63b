/*  srv_session.h: device sessions: who holds which slot, sending to a
    device, dropping one. Internal to the server (srv_internal.h).

    A drop only records: the device leaves its slot, its queued
    micro-batches are discarded, the planner forgets its probe. Whether
    the round closes, the run aborts or an epoch-end re-plan can go on is
    decided afterwards by the step function (srv_step.c).
*/
#ifndef SRV_SESSION_H_INCLUDED
#define SRV_SESSION_H_INCLUDED

#include "srv_internal.h"

//  Sends *msg_p to d (ownership moves). The ROUTER never blocks: a device
//  whose send queue is full or whose connection is gone is marked to be
//  dropped (srv_session_drop_pending); a device so marked is sent nothing.
void srv_send (srv_t *self, srv_device_t *d, proto_msg_t **msg_p);
//  An ERROR to one peer: 0, or -1 (errno set) when it could not be queued.
int srv_send_error_to (srv_t *self, const uint8_t *rid, size_t rid_len, uint32_t code,
                       const char *text);
//  The joined device with this routing id, or NULL.
srv_device_t *srv_find (srv_t *self, const uint8_t *rid, size_t rid_len);
//  Drops d from the run now: it gets ERROR code (0: none) if it can hear.
void srv_drop (srv_t *self, srv_device_t *d, uint32_t code, const char *why);
//  Marks d to be dropped by the reactor loop; the first reason wins.
void srv_drop_later (srv_device_t *d, uint32_t code, bool diverged, const char *why);
//  Drops the marked devices. true when any was dropped.
bool srv_session_drop_pending (srv_t *self);
//  Before the start: drops now every joined device that is marked to be
//  dropped or whose connection is gone (a HELLO libzmq had queued from a
//  connection that died before the server read it). The number dropped.
int srv_session_drop_gone (srv_t *self);
//  Too few devices are left: tells every joined device and ends the run.
void srv_session_abort_all (srv_t *self, const char *why);
int srv_session_active_count (const srv_t *self);

//  A HELLO from a peer that holds no session (peer->user_id: its CURVE key,
//  "" with --insecure; peer->fd its connection's): takes a slot and answers
//  WELCOME, or answers ERROR.
void srv_session_hello (srv_t *self, const proto_msg_t *msg, const uint8_t *rid,
                        size_t rid_len, const proto_peer_t *peer);
//  The ROUTER's connection events so far (srv_monitor.h): a device whose
//  connection libzmq closed is marked (srv_device_t.closed). The number
//  marked.
int srv_session_transport (srv_t *self);
//  The same after asking the monitor for every event libzmq emitted up to
//  this call (srv_monitor_sync: a round trip to its thread, at most 2 s).
//  true when that answer came: every connection closed before now is then
//  marked.
bool srv_session_transport_synced (srv_t *self);
//  Drops the marked devices once the ROUTER has nothing more to read (what
//  a connection sent before its close is read first: a BYE is a BYE), its
//  id, key and the receive cap logged (libzmq does not say why it closed
//  one; a frame over the cap is one reason). The number dropped.
int srv_session_drop_closed (srv_t *self);
//  Tells device id its assignment (PLAN).
void srv_session_send_plan (srv_t *self, int id);
//  After SIGHUP reloaded the allow-list: marks devices whose key left it.
void srv_session_drop_revoked (srv_t *self);
//  HEARTBEATs every heartbeat_s.
void srv_session_heartbeat (srv_t *self);
//  ZMQ_SNDHWM for the ROUTER (messages per device).
int srv_session_send_hwm (const srv_t *self);

#endif
