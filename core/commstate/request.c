/* The mark a running collective leaves on its request (request.h). */
#include "commstate/request.h"

void plait_request_mark_posted(plait_request *r, plait_device_event *done) {
    pthread_mutex_lock(&r->comm->lock);
    r->done_ev = done;
    r->posted = done != NULL;
    pthread_cond_broadcast(&r->comm->done_cond);
    pthread_mutex_unlock(&r->comm->lock);
}
